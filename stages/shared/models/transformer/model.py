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
(``DecoderLayer.decode_step``), and following the surviving beams copies only the
self-attention caches, not a copy of the encoding per beam at every step.

A decoding step handles one token per row, so its cost on a CPU is as much the number
of operators it calls (each a few microseconds of dispatch, on one thread whatever the
thread count) as their arithmetic. ``start_decoding`` therefore prepares, once per
batch, what every step would otherwise recompute (``DecodingWeights``): the query, key
and value projections of self-attention stacked into one, the 1/sqrt(d) of attention
folded into the query projections, the embedding scaled by sqrt(d_model), the
cross-attention keys transposed and the source padding mask as an additive bias.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from stages.shared.models.dropout import Dropout
from stages.shared.models.layers import FeedForward, MultiHeadAttention, PositionalEmbedding, Residual
from stages.shared.models.transformer.config import TransformerConfig, check_vocabularies


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

    def forward(self, x: Tensor, cross_kv: tuple[Tensor, Tensor], src_mask: Tensor) -> Tensor:
        """Teacher-forced: every target position at once, under a causal mask."""
        x = self.self_residual(x, lambda h: self.self_attention(h, *self.self_attention.keys_values(h), causal=True))
        x = self.cross_residual(x, lambda h: self.cross_attention(h, *cross_kv, src_mask))
        return self.feed_forward_residual(x, self.feed_forward)

    def decode_step(self, x: Tensor, weights: LayerWeights, source: SourceMemory, cache: SelfAttentionCache
                    ) -> tuple[Tensor, SelfAttentionCache]:
        """One incremental step: ``x`` (rows, 1, D), one token per row, ``rows`` a
        multiple of the sentences (their beams, side by side). The same arithmetic as
        ``forward`` at the last position, in fewer operators (``DecodingWeights``).
        Attention is two batched products rather than SDPA: with one query per row (a
        sentence's beams in cross-attention), SDPA's CPU kernel, which splits its work
        by blocks of queries, did not get faster with a second thread."""
        rows, heads = x.size(0), self.self_attention.heads

        # Self-attention over the cache and this step: (rows, 1, 3D) -> three (rows, H, 1, D/H).
        query, key, value = F.linear(self.self_residual.input(x), *weights.query_key_value
                                     ).view(rows, 3, heads, 1, -1).unbind(1)
        cache = SelfAttentionCache(torch.cat([cache.keys, key], dim=2), torch.cat([cache.values, value], dim=2))
        attended = (query @ cache.keys.transpose(-2, -1)).softmax(dim=-1) @ cache.values  # (rows, H, 1, D/H)
        x = self.self_residual.output(x, self.self_attention.out(attended.view(rows, 1, -1)))

        # Cross-attention: a sentence's beams are its query positions, (B, H, beams, D/H).
        sentences, head_dim = source.keys.size(0), source.keys.size(2)
        query = F.linear(self.cross_residual.input(x), *weights.cross_query).view(sentences, -1, heads, head_dim)
        scores = torch.matmul(query.transpose(1, 2), source.keys) + source.padding_bias
        attended = scores.softmax(dim=-1) @ source.values
        x = self.cross_residual.output(x, self.cross_attention.out(attended.transpose(1, 2).reshape(rows, 1, -1)))

        return self.feed_forward_residual(x, self.feed_forward), cache


@dataclass(frozen=True)
class LayerWeights:
    """A decoder layer's attention projections, prepared for decoding steps."""

    query_key_value: tuple[Tensor, Tensor]  # weight (3D, D), bias (3D,); the query rows scaled by 1/sqrt(D/H)
    cross_query: tuple[Tensor, Tensor]  # weight (D, D), bias (D,), scaled by 1/sqrt(D/H)


@dataclass(frozen=True)
class DecodingWeights:
    """What every decoding step of a batch would otherwise recompute from the
    parameters; made once per batch by ``start_decoding`` (the parameters may change
    between batches, as in the validation decoding of training)."""

    scaled_embedding: Tensor  # (V, D): the target embedding times sqrt(d_model)
    positions: Tensor  # (max_positions, D): sinusoids or the learned table
    layers: list[LayerWeights]
    # (D, V): the output projection transposed, so that the step's largest product reads
    # both operands row by row (x @ W^T with W as stored ran 8-10% slower on one core).
    output_transposed: Tensor

    @classmethod
    def of(cls, model: Transformer) -> DecodingWeights:
        def scaled_query(attention: MultiHeadAttention) -> tuple[Tensor, Tensor]:
            scale = (attention.query.out_features // attention.heads) ** -0.5
            return attention.query.weight * scale, attention.query.bias * scale

        layers = []
        for layer in model.decoder:
            attention = layer.self_attention
            query_weight, query_bias = scaled_query(attention)
            layers.append(LayerWeights(
                (torch.cat([query_weight, attention.key.weight, attention.value.weight]),
                 torch.cat([query_bias, attention.key.bias, attention.value.bias])),
                scaled_query(layer.cross_attention)))
        table = model.positions.table
        return cls(model.tgt_embedding.weight * math.sqrt(model.config.d_model),
                   table.weight if table is not None else model.positions.sinusoids, layers,
                   model.output.weight.t().contiguous())


@dataclass(frozen=True)
class SourceMemory:
    """A decoder layer's view of the encoded source, once per sentence (B rows)."""

    keys: Tensor  # (B, H, D/H, S): transposed, ready for query @ keys
    values: Tensor  # (B, H, S, D/H)
    padding_bias: Tensor  # (B, 1, 1, S): 0 at source tokens, -inf at padding; shared by the layers

    def select(self, sentences: Tensor) -> SourceMemory:
        return SourceMemory(self.keys.index_select(0, sentences), self.values.index_select(0, sentences),
                            self.padding_bias.index_select(0, sentences))


@dataclass(frozen=True)
class SelfAttentionCache:
    keys: Tensor  # (rows, H, T, D/H): the T tokens decoded so far
    values: Tensor

    def select(self, rows: Tensor) -> SelfAttentionCache:
        return SelfAttentionCache(self.keys.index_select(0, rows), self.values.index_select(0, rows))


@dataclass(frozen=True)
class TransformerState:
    """What ``decode_step`` needs: the prepared weights, each layer's view of the
    source (once per sentence in beam search) and its self-attention cache (per row)."""

    weights: DecodingWeights
    sources: list[SourceMemory]  # per layer
    caches: list[SelfAttentionCache]  # per layer
    step: int

    def reorder(self, order: Tensor, sentences: Tensor | None = None) -> TransformerState:
        """Rows ``order`` of the caches. With ``sentences`` (which of the sentences the
        rows belong to, in order), the encodings stay once per sentence and are copied
        only when sentences leave; without, every row gets its own."""
        if sentences is not None and len(sentences) == self.sources[0].keys.size(0):
            sources = self.sources  # the same sentences, in the same order
        else:
            kept = order if sentences is None else sentences  # without sentences: a copy per row
            sources = [source.select(kept) for source in self.sources]
        return TransformerState(self.weights, sources, [cache.select(order) for cache in self.caches], self.step)


class Transformer(nn.Module):
    family = "transformer"

    def __init__(self, config: TransformerConfig, src_vocab: int, tgt_vocab: int, pad_id: int = 0):
        super().__init__()
        check_vocabularies(config, src_vocab, tgt_vocab)
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
        padding_bias = torch.zeros(mask.shape, dtype=memory.dtype, device=memory.device).masked_fill(~mask, -math.inf)
        sources, caches = [], []
        for layer in self.decoder:
            keys, values = layer.cross_attention.keys_values(memory)
            sources.append(SourceMemory(keys.transpose(-2, -1).contiguous(), values, padding_bias))
            empty = keys[:, :, :0]  # (B, H, 0, D/H): nothing decoded yet
            caches.append(SelfAttentionCache(empty, empty))
        return TransformerState(DecodingWeights.of(self), sources, caches, 0)

    def decode_step(self, state: TransformerState, tokens: Tensor) -> tuple[Tensor, TransformerState]:
        weights = state.weights
        # The embedding of _embed, from the prepared table; no dropout (decoding is eval mode).
        x = (F.embedding(tokens, weights.scaled_embedding) + weights.positions[state.step]).unsqueeze(1)
        caches = []
        for layer, layer_weights, source, cache in zip(self.decoder, weights.layers, state.sources, state.caches):
            x, cache = layer.decode_step(x, layer_weights, source, cache)
            caches.append(cache)
        logits = self.decoder_norm(x).squeeze(1) @ weights.output_transposed
        return F.log_softmax(logits.float(), dim=-1), TransformerState(weights, state.sources, caches, state.step + 1)

    def reorder_state(self, state: TransformerState, order: Tensor, sentences: Tensor | None = None
                      ) -> TransformerState:
        return state.reorder(order, sentences)
