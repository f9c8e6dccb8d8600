"""The Transformer of Vaswani et al. (2017), "Attention is all you need".

Encoder and decoder stacks of N layers (section 3.1); multi-head scaled dot-product
attention (3.2); position-wise ReLU feed-forward (3.3); shared source, target and
pre-softmax embeddings scaled by sqrt(d_model) (3.4); sinusoidal positions (3.5);
residual dropout on every sublayer output and on the embedding sums (5.4), and no
dropout on the attention weights unless ``attention_dropout`` asks for it (the paper
has none; without it, SDPA can take its fused kernels, see ``MultiHeadAttention``). Each
sublayer is LayerNorm(x + Sublayer(x)) as in the paper, or x + Sublayer(LayerNorm(x))
with a final LayerNorm when ``pre_norm`` is set.

Incremental decoding: ``start_decoding`` runs the encoder once and projects its
output to each decoder layer's cross-attention keys and values; ``decode_step``
appends the new token's self-attention keys and values to a per-layer cache. In beam
search the cross-attention keys and values stay once per sentence, not per beam: all
of a sentence's beams attend to the same encoding, so they are its queries side by side
(``DecoderLayer.forward``), and following the surviving beams copies only the
self-attention caches, not a copy of the encoding per beam at every step.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from stages.train.models.dropout import Dropout
from stages.train.models.presets import TransformerConfig


def sinusoidal_table(positions: int, dim: int) -> Tensor:
    """PE(pos, 2i) = sin(pos / 10000^(2i/d)), PE(pos, 2i+1) = cos(...) (section 3.5)."""
    position = torch.arange(positions, dtype=torch.float32).unsqueeze(1)
    frequency = torch.exp(torch.arange(0, dim, 2, dtype=torch.float32) * (-math.log(10000.0) / dim))
    table = torch.zeros(positions, dim)
    table[:, 0::2] = torch.sin(position * frequency)
    table[:, 1::2] = torch.cos(position * frequency)
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
                causal: bool = False, fused: bool = True) -> Tensor:
        """``mask``: boolean, True where a query may attend to a key, broadcast to (B, H, Tq, Tk).

        ``fused=False`` computes softmax(q k^T / sqrt(d)) v as two batched products, for
        incremental decoding: a step has one query per row (a sentence's beams in
        cross-attention), and SDPA's CPU kernel, which splits its work by blocks of
        queries, did not get faster with a second thread there (benchmarks/decode_speed.py
        --profile)."""
        query = self.split_heads(self.query(x))
        if fused:
            attended = F.scaled_dot_product_attention(query, keys, values, attn_mask=mask, is_causal=causal,
                                                      dropout_p=self.dropout if self.training else 0.0)
        else:
            attended = self._scores(query, keys, mask, causal).softmax(dim=-1) @ values
        return self.out(attended.transpose(1, 2).reshape(x.shape))

    def weights(self, x: Tensor, keys: Tensor, mask: Tensor | None = None, causal: bool = False) -> Tensor:
        """(B, H, Tq, Tk): the attention probabilities ``forward`` applies, computed
        explicitly (the fused kernels never materialize them), for inspection."""
        return self._scores(self.split_heads(self.query(x)), keys, mask, causal).float().softmax(dim=-1)

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
        if self.pre_norm:
            return x + self.dropout(sublayer(self.norm(x)))
        return self.norm(x + self.dropout(sublayer(x)))


class EncoderLayer(nn.Module):
    def __init__(self, config: TransformerConfig):
        super().__init__()
        self.attention = MultiHeadAttention(config.d_model, config.heads, config.attention_dropout)
        self.feed_forward = FeedForward(config.d_model, config.ff_dim)
        self.attention_residual = Residual(config.d_model, config.dropout, config.pre_norm)
        self.feed_forward_residual = Residual(config.d_model, config.dropout, config.pre_norm)

    def forward(self, x: Tensor, mask: Tensor) -> Tensor:
        x = self.attention_residual(x, lambda h: self.attention(h, *self.attention.keys_values(h), mask))
        return self.feed_forward_residual(x, self.feed_forward)


class DecoderLayer(nn.Module):
    def __init__(self, config: TransformerConfig):
        super().__init__()
        self.self_attention = MultiHeadAttention(config.d_model, config.heads, config.attention_dropout)
        self.cross_attention = MultiHeadAttention(config.d_model, config.heads, config.attention_dropout)
        self.feed_forward = FeedForward(config.d_model, config.ff_dim)
        self.self_residual = Residual(config.d_model, config.dropout, config.pre_norm)
        self.cross_residual = Residual(config.d_model, config.dropout, config.pre_norm)
        self.feed_forward_residual = Residual(config.d_model, config.dropout, config.pre_norm)

    def forward(self, x: Tensor, cross_kv: tuple[Tensor, Tensor], src_mask: Tensor,
                cache: list[Tensor] | None = None) -> Tensor:
        """Teacher-forced when ``cache`` is None (causal mask); else one step, extending the cache."""
        def self_attend(h: Tensor) -> Tensor:
            keys, values = self.self_attention.keys_values(h)
            if cache is None:
                return self.self_attention(h, keys, values, causal=True)
            if cache:
                keys, values = torch.cat([cache[0], keys], dim=2), torch.cat([cache[1], values], dim=2)
            cache[:] = [keys, values]
            return self.self_attention(h, keys, values, fused=False)

        def cross_attend(h: Tensor) -> Tensor:
            incremental = cache is not None
            beams = h.size(0) // cross_kv[0].size(0)  # rows per sentence: > 1 in beam search
            if beams == 1:
                return self.cross_attention(h, *cross_kv, src_mask, fused=not incremental)
            # (B * beams, 1, D) -> (B, beams, D): a sentence's beams as its query positions.
            per_sentence = h.reshape(-1, beams * h.size(1), h.size(2))
            return self.cross_attention(per_sentence, *cross_kv, src_mask, fused=not incremental).reshape(h.shape)

        x = self.self_residual(x, self_attend)
        x = self.cross_residual(x, cross_attend)
        return self.feed_forward_residual(x, self.feed_forward)


@dataclass
class TransformerState:
    """What ``decode_step`` needs: per-layer cross-attention K/V, self-attention caches."""

    cross_kv: list[tuple[Tensor, Tensor]]  # per layer: (B, H, S, D/H), once per sentence in beam search
    src_mask: Tensor  # (B, 1, 1, S)
    caches: list[list[Tensor]]  # per layer: keys, values (B * beams, H, T, D/H)
    step: int

    def reorder(self, order: Tensor, sentences: Tensor | None = None) -> TransformerState:
        """Rows ``order`` of the caches. With ``sentences`` (which of the sentences the
        rows belong to, in order), the encodings stay once per sentence and are copied
        only when sentences leave; without, every row gets its own."""
        if sentences is not None and len(sentences) == self.src_mask.size(0):
            cross_kv, src_mask = self.cross_kv, self.src_mask  # the same sentences, in the same order
        else:
            kept = order if sentences is None else sentences  # without sentences: a copy per row
            cross_kv = [(k.index_select(0, kept), v.index_select(0, kept)) for k, v in self.cross_kv]
            src_mask = self.src_mask.index_select(0, kept)
        return TransformerState(cross_kv, src_mask, [[t.index_select(0, order) for t in cache] for cache in self.caches],
                                self.step)


class Transformer(nn.Module):
    family = "transformer"

    def __init__(self, config: TransformerConfig, src_vocab: int, tgt_vocab: int, pad_id: int = 0):
        super().__init__()
        if config.share_embeddings and src_vocab != tgt_vocab:
            raise ValueError("share_embeddings needs a joint vocabulary (bpe.joint: true)")
        self.config, self.pad_id = config, pad_id
        self.src_embedding = nn.Embedding(src_vocab, config.d_model, padding_idx=pad_id)
        self.tgt_embedding = (self.src_embedding if config.share_embeddings
                              else nn.Embedding(tgt_vocab, config.d_model, padding_idx=pad_id))
        self.positions = PositionalEmbedding(config.max_positions, config.d_model, config.learned_positions)
        self.embedding_dropout = Dropout(config.dropout)
        self.encoder = nn.ModuleList(EncoderLayer(config) for _ in range(config.encoder_layers))
        self.decoder = nn.ModuleList(DecoderLayer(config) for _ in range(config.decoder_layers))
        # Pre-LN leaves the residual stream unnormalized; a final LayerNorm closes each stack.
        self.encoder_norm = nn.LayerNorm(config.d_model) if config.pre_norm else nn.Identity()
        self.decoder_norm = nn.LayerNorm(config.d_model) if config.pre_norm else nn.Identity()
        self.output = nn.Linear(config.d_model, tgt_vocab, bias=False)
        self._initialize()
        if config.share_embeddings:
            self.output.weight = self.tgt_embedding.weight

    def _initialize(self) -> None:
        for module in self.modules():
            if isinstance(module, nn.Linear):
                nn.init.xavier_uniform_(module.weight)
                if module.bias is not None:
                    nn.init.zeros_(module.bias)
        for embedding in {self.src_embedding, self.tgt_embedding}:
            nn.init.normal_(embedding.weight, std=self.config.d_model ** -0.5)
            nn.init.zeros_(embedding.weight[self.pad_id])

    def _embed(self, embedding: nn.Embedding, tokens: Tensor, offset: int = 0) -> Tensor:
        positions = torch.arange(offset, offset + tokens.size(1), device=tokens.device).unsqueeze(0)
        scaled = embedding(tokens) * math.sqrt(self.config.d_model)
        # DeepSpeed's bf16 and fp16 modes cast the parameters but keep buffers (the
        # sinusoid table) in fp32: the sum must stay in the parameters' precision.
        return self.embedding_dropout(scaled + self.positions(positions).to(scaled.dtype))

    def encode(self, src: Tensor) -> tuple[Tensor, Tensor]:
        mask = (src != self.pad_id)[:, None, None, :]
        x = self._embed(self.src_embedding, src)
        for layer in self.encoder:
            x = layer(x, mask)
        return self.encoder_norm(x), mask

    def forward(self, src: Tensor, tgt_in: Tensor) -> Tensor:
        """Teacher-forced logits (B, T, V) for target input ``tgt_in`` (BOS + target[:-1])."""
        memory, mask = self.encode(src)
        x = self._embed(self.tgt_embedding, tgt_in)
        for layer in self.decoder:
            x = layer(x, layer.cross_attention.keys_values(memory), mask)
        return self.output(self.decoder_norm(x))

    def start_decoding(self, src: Tensor) -> TransformerState:
        memory, mask = self.encode(src)
        cross_kv = [layer.cross_attention.keys_values(memory) for layer in self.decoder]
        return TransformerState(cross_kv, mask, [[] for _ in self.decoder], 0)

    def decode_step(self, state: TransformerState, tokens: Tensor) -> tuple[Tensor, TransformerState]:
        x = self._embed(self.tgt_embedding, tokens.unsqueeze(1), offset=state.step)
        caches = [list(cache) for cache in state.caches]
        for layer, cross_kv, cache in zip(self.decoder, state.cross_kv, caches):
            x = layer(x, cross_kv, state.src_mask, cache)
        logits = self.output(self.decoder_norm(x)).squeeze(1)
        return F.log_softmax(logits.float(), dim=-1), TransformerState(state.cross_kv, state.src_mask, caches,
                                                                       state.step + 1)

    def reorder_state(self, state: TransformerState, order: Tensor, sentences: Tensor | None = None
                      ) -> TransformerState:
        return state.reorder(order, sentences)
