"""The search settings' defaults, apart from their checks (search.py), so that the
``nmt`` command line shows them in ``--help`` without importing pydantic.

Vaswani et al. (2017), section 6.1: beam 4, length penalty alpha 0.6, at most source
length + 50 tokens; fairseq's minimum length of 1 (a weak model's likeliest output is
often the empty one).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class SearchDefaults:
    beam_size: int = 4
    nbest: int = 1
    length_penalty: float = 0.6
    max_length_a: float = 1.0
    max_length_b: int = 50
    min_length: int = 1
    precision: str = "auto"
    device: str = "cpu"


SEARCH_DEFAULTS = SearchDefaults()
