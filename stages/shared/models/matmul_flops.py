"""FLOPs of the matrix products that several families share, counted as
``stages/shared/models/flops.py`` says: a product of (m x k) by (k x n) is 2mkn. Torch-free."""

from __future__ import annotations


def attention_layer(queries: int, keys: int, d: int, project_keys: bool = True) -> int:
    projections = 2 * queries * d * d * 2  # query and output projections
    if project_keys:
        projections += 2 * keys * d * d * 2  # key and value projections
    return projections + 2 * 2 * queries * keys * d  # scores and weighted sum
