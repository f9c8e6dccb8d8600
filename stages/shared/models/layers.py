"""Transformer building blocks shared by the families that stack them: sinusoidal or
learned positions, multi-head attention through torch's fused kernels, the position-wise
feed-forward and the residual connection with its LayerNorm (Vaswani et al. 2017,
sections 3.2-3.5)."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from stages.shared.models.dropout import Dropout


def sinusoidal_table(positions: int, dim: int) -> Tensor:
    """PE(pos, 2i) = sin(pos / 10000^(2i/d)), PE(pos, 2i+1) = cos(...) (section 3.5).
    An odd ``dim`` (the ``w3`` presets) ends on a sine without its cosine."""
    position = torch.arange(positions, dtype=torch.float32).unsqueeze(1)
    frequency = torch.exp(torch.arange(0, dim, 2, dtype=torch.float32) * (-math.log(10000.0) / dim))
    table = torch.zeros(positions, dim)
    table[:, 0::2] = torch.sin(position * frequency)
    table[:, 1::2] = torch.cos(position * frequency[:dim // 2])
    return table


class PositionalEmbedding(nn.Module):
    def __init__(self, max_positions: int, dim: int, learned: bool):
        super().__init__()
        if learned:
            self.table = nn.Embedding(max_positions, dim)
            nn.init.normal_(self.table.weight, std=dim ** -0.5)
        else:
            self.register_buffer("sinusoids", sinusoidal_table(max_positions, dim), persistent=False)
            self.table = None

    def forward(self, positions: Tensor) -> Tensor:
        return self.table(positions) if self.table is not None else self.sinusoids[positions]


class MultiHeadAttention(nn.Module):
    """Attention through ``F.scaled_dot_product_attention`` in the forms its fused kernels
    accept: no mask and ``is_causal`` (decoder self-attention in training: flash on a GPU),
    or a boolean key-padding mask broadcast as (B, 1, 1, S) or a full (B, 1, L, L) mask
    (memory-efficient kernel on a GPU, the fused CPU kernel on a CPU). Dropout on the
    attention weights sends both back to the unfused math path, so it is off by default.
    tests/unit/stages/train/test_attention_masks.py checks that every layout gives the
    same outputs; tests/gpu checks which kernel runs on CUDA."""

    def __init__(self, d_model: int, heads: int, dropout: float):
        super().__init__()
        self.heads, self.dropout = heads, dropout
        self.query = nn.Linear(d_model, d_model)
        self.key = nn.Linear(d_model, d_model)
        self.value = nn.Linear(d_model, d_model)
        self.out = nn.Linear(d_model, d_model)

    def split_heads(self, x: Tensor) -> Tensor:  # (B, T, D) -> (B, H, T, D/H)
        return x.view(x.size(0), x.size(1), self.heads, -1).transpose(1, 2)

    def keys_values(self, x: Tensor) -> tuple[Tensor, Tensor]:
        return self.split_heads(self.key(x)), self.split_heads(self.value(x))

    def forward(self, x: Tensor, keys: Tensor, values: Tensor, mask: Tensor | None = None,
                causal: bool = False) -> Tensor:
        """``mask``: boolean, True where a query may attend to a key, broadcast to (B, H, Tq, Tk).
        Incremental decoding does not come here: ``DecoderLayer.decode_step``."""
        query = self.split_heads(self.query(x))
        attended = F.scaled_dot_product_attention(query, keys, values, attn_mask=mask, is_causal=causal,
                                                  dropout_p=self.dropout if self.training else 0.0)
        return self.out(attended.transpose(1, 2).reshape(x.shape))

    def weights(self, x: Tensor, keys: Tensor, mask: Tensor | None = None, causal: bool = False) -> Tensor:
        """(B, H, Tq, Tk): the attention probabilities ``forward`` applies, computed
        explicitly (the fused kernels never materialize them), for inspection."""
        return self._scores(self.split_heads(self.query(x)), keys, mask, causal).float().softmax(dim=-1)

    def weights_of_call(self, args: tuple, kwargs: dict) -> Tensor:
        """``weights`` for the arguments of one ``forward`` call (a forward hook's view)."""
        bound = dict(zip(("x", "keys", "values", "mask", "causal"), args), **kwargs)
        return self.weights(bound["x"], bound["keys"], bound.get("mask"), bound.get("causal", False))

    @staticmethod
    def _scores(query: Tensor, keys: Tensor, mask: Tensor | None, causal: bool) -> Tensor:
        scores = query @ keys.transpose(-2, -1) / math.sqrt(query.size(-1))
        if causal:  # query i sees keys up to i (the last Tq of Tk positions are the queries')
            allowed = torch.ones(scores.shape[-2:], dtype=torch.bool, device=query.device).tril(
                keys.size(2) - query.size(2))
            scores = scores.masked_fill(~allowed, float("-inf"))
        if mask is not None:
            scores = scores.masked_fill(~mask, float("-inf"))
        return scores


class FeedForward(nn.Module):
    def __init__(self, d_model: int, ff_dim: int, activation=F.relu):
        super().__init__()
        self.inner, self.outer, self.activation = nn.Linear(d_model, ff_dim), nn.Linear(ff_dim, d_model), activation

    def forward(self, x: Tensor) -> Tensor:
        return self.outer(self.activation(self.inner(x)))


class Residual(nn.Module):
    """Residual connection, dropout and LayerNorm around one sublayer, post- or pre-LN."""

    def __init__(self, d_model: int, dropout: float, pre_norm: bool):
        super().__init__()
        self.norm, self.dropout, self.pre_norm = nn.LayerNorm(d_model), Dropout(dropout), pre_norm

    def forward(self, x: Tensor, sublayer) -> Tensor:
        return self.output(x, sublayer(self.input(x)))

    def input(self, x: Tensor) -> Tensor:
        """What the sublayer reads: LayerNorm(x) in pre-LN, x in post-LN."""
        return self.norm(x) if self.pre_norm else x

    def output(self, x: Tensor, sublayer_output: Tensor) -> Tensor:
        if self.pre_norm:
            return x + self.dropout(sublayer_output)
        return self.norm(x + self.dropout(sublayer_output))
