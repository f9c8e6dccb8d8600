"""Our shared layers written into CTranslate2's model specs: embeddings, position
tables, attention, feed-forward and LayerNorm weights as the arrays CTranslate2 reads.
Used by the families CTranslate2 runs (their ``ctranslate2.py``); ctranslate2 itself is
imported there, not here."""

from __future__ import annotations

import numpy as np
from torch import Tensor, nn

# Our LayerNorms are torch's default; CTranslate2's default epsilon is 1e-6.
LAYER_NORM_EPSILON = 1e-5


def special_tokens(config, vocab_pieces: list[str], special_ids: dict) -> None:
    config.unk_token = vocab_pieces[special_ids["unk"]]
    config.bos_token = vocab_pieces[special_ids["bos"]]
    config.eos_token = vocab_pieces[special_ids["eos"]]
    config.layer_norm_epsilon = LAYER_NORM_EPSILON


def array(tensor: Tensor) -> np.ndarray:
    return tensor.detach().float().cpu().numpy().copy()


def position_table(positions: nn.Module, max_positions: int) -> np.ndarray:
    """(max_positions, d_model): the table our model adds to its scaled embeddings."""
    import torch

    return array(positions(torch.arange(max_positions)))


def linear(spec, linear: nn.Linear) -> None:
    spec.weight = array(linear.weight)
    if linear.bias is not None:
        spec.bias = array(linear.bias)


def fused(spec, linears: list[nn.Linear]) -> None:
    """One projection for several (queries, keys and values): their rows stacked."""
    spec.weight = np.concatenate([array(linear.weight) for linear in linears])
    spec.bias = np.concatenate([array(linear.bias) for linear in linears])


def layer_norm(spec, norm: nn.LayerNorm) -> None:
    spec.gamma, spec.beta = array(norm.weight), array(norm.bias)


def self_attention(spec, attention: nn.Module, norm: nn.LayerNorm) -> None:
    fused(spec.linear[0], [attention.query, attention.key, attention.value])
    linear(spec.linear[1], attention.out)
    layer_norm(spec.layer_norm, norm)


def cross_attention(spec, attention: nn.Module, norm: nn.LayerNorm) -> None:
    linear(spec.linear[0], attention.query)
    fused(spec.linear[1], [attention.key, attention.value])
    linear(spec.linear[2], attention.out)
    layer_norm(spec.layer_norm, norm)


def feed_forward(spec, feed_forward: nn.Module, norm: nn.LayerNorm) -> None:
    linear(spec.linear_0, feed_forward.inner)
    linear(spec.linear_1, feed_forward.outer)
    layer_norm(spec.layer_norm, norm)
