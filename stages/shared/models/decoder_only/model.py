"""Decoder-only translation model: Wang et al. (2021), "Language models are good
translators" (arXiv:2106.13627).

One causal Transformer stack (pre-LN, GELU, final LayerNorm) reads the sequence
``<src-lang> source <tgt-lang> target``. Batches keep the encoder-decoder layout
(padded ``src``, and ``tgt_in`` starting with BOS); the model builds the sequence
``[src_tag, src, tgt_tag, tgt_in[1:]]``, so the BOS slot carries the target-language
tag. Padding inside that sequence (after a short source) is invisible: pad keys are
masked and positions count only real tokens.

Loss (section 3.2): lambda_d * L_AE + L_MT, where L_AE is the language-model loss on
the source tokens and lambda_d decays piecewise-linearly; see ``config.ae_weight``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from stages.shared.models.dropout import Dropout
from stages.shared.models.decoder_only.config import DecoderOnlyConfig
from stages.shared.models.layers import (
    FeedForward,
    MultiHeadAttention,
    PositionalEmbedding,
    Residual,
)


class Block(nn.Module):
    def __init__(self, config: DecoderOnlyConfig):
        super().__init__()
        self.attention = MultiHeadAttention(config.d_model, config.heads, config.attention_dropout)
        self.feed_forward = FeedForward(config.d_model, config.ff_dim, activation=F.gelu)
        self.attention_residual = Residual(config.d_model, config.dropout, pre_norm=True)
        self.feed_forward_residual = Residual(config.d_model, config.dropout, pre_norm=True)

    def forward(self, x: Tensor, mask: Tensor, cache: list[Tensor] | None = None) -> Tensor:
        def attend(h: Tensor) -> Tensor:
            keys, values = self.attention.keys_values(h)
            if cache is not None:
                if cache:
                    keys, values = torch.cat([cache[0], keys], dim=2), torch.cat([cache[1], values], dim=2)
                cache[:] = [keys, values]
            return self.attention(h, keys, values, mask)

        x = self.attention_residual(x, attend)
        return self.feed_forward_residual(x, self.feed_forward)


@dataclass
class DecoderOnlyState:
    caches: list[list[Tensor]]  # per layer: keys, values (B, H, L, D/H)
    key_valid: Tensor  # (B, L): False at padding
    next_position: Tensor  # (B,): position of the next real token
    step: int

    def reorder(self, order: Tensor) -> DecoderOnlyState:
        return DecoderOnlyState([[t.index_select(0, order) for t in cache] for cache in self.caches],
                                self.key_valid.index_select(0, order), self.next_position.index_select(0, order),
                                self.step)


class DecoderOnlyTranslator(nn.Module):
    family = "decoder_only"

    def __init__(self, config: DecoderOnlyConfig, vocab: int, src_tag_id: int, tgt_tag_id: int, pad_id: int = 0):
        super().__init__()
        self.config, self.pad_id = config, pad_id
        self.src_tag_id, self.tgt_tag_id = src_tag_id, tgt_tag_id
        self.embedding = nn.Embedding(vocab, config.d_model, padding_idx=pad_id)
        self.positions = PositionalEmbedding(config.max_positions, config.d_model, config.learned_positions)
        self.embedding_dropout = Dropout(config.dropout)
        self.blocks = nn.ModuleList(Block(config) for _ in range(config.layers))
        self.final_norm = nn.LayerNorm(config.d_model)
        self.output = nn.Linear(config.d_model, vocab, bias=False)
        for module in self.modules():
            if isinstance(module, nn.Linear):
                nn.init.xavier_uniform_(module.weight)
                if module.bias is not None:
                    nn.init.zeros_(module.bias)
        nn.init.normal_(self.embedding.weight, std=config.d_model ** -0.5)
        nn.init.zeros_(self.embedding.weight[pad_id])
        self.output.weight = self.embedding.weight

    def _embed(self, tokens: Tensor, positions: Tensor) -> Tensor:
        scaled = self.embedding(tokens) * math.sqrt(self.config.d_model)
        # DeepSpeed's bf16 and fp16 modes cast the parameters but keep buffers (the
        # sinusoid table) in fp32: the sum must stay in the parameters' precision.
        return self.embedding_dropout(scaled + self.positions(positions).to(scaled.dtype))

    def _sequence(self, src: Tensor, tgt_in: Tensor) -> Tensor:
        batch = src.size(0)
        src_tag = torch.full((batch, 1), self.src_tag_id, dtype=src.dtype, device=src.device)
        tgt_tag = torch.full((batch, 1), self.tgt_tag_id, dtype=src.dtype, device=src.device)
        return torch.cat([src_tag, src, tgt_tag, tgt_in[:, 1:]], dim=1)

    def _mask(self, valid: Tensor, source_length: int) -> Tensor:
        """(B, 1, L, L): causal, no padding keys; the source block sees itself whole if prefix."""
        length = valid.size(1)
        allowed = torch.ones(length, length, dtype=torch.bool, device=valid.device).tril()
        if self.config.prefix_attention:
            allowed[:source_length, :source_length] = True
        return (allowed.unsqueeze(0) & valid[:, None, :]).unsqueeze(1)

    def forward_all(self, src: Tensor, tgt_in: Tensor, source_logits: bool = True) -> tuple[Tensor | None, Tensor]:
        """Logits predicting the source tokens (B, S, V) and the target tokens (B, T, V).
        Without ``source_logits`` (once L_AE weighs nothing) the source positions are not
        projected onto the vocabulary, and the first is None."""
        sequence = self._sequence(src, tgt_in)
        valid = sequence != self.pad_id
        positions = (valid.cumsum(dim=1) - 1).clamp(min=0)
        source_length = src.size(1) + 1  # the source tag and the source
        mask = self._mask(valid, source_length)
        x = self._embed(sequence, positions)
        for block in self.blocks:
            x = block(x, mask)
        # Position i predicts token i + 1: the tag and source[:-1] predict the source;
        # the target tag and tgt_in[1:] predict the target.
        if not source_logits:
            return None, self.output(self.final_norm(x[:, source_length:]))
        logits = self.output(self.final_norm(x))
        return logits[:, : src.size(1)], logits[:, source_length:]

    def forward(self, src: Tensor, tgt_in: Tensor) -> Tensor:
        return self.forward_all(src, tgt_in)[1]

    def compile(self, *args, **kwargs) -> None:
        """``nn.Module.compile``, and ``forward_all`` compiled alike: training calls it
        (its loss reads the source's logits too), not the module."""
        super().compile(*args, **kwargs)
        self.forward_all = torch.compile(self.forward_all, *args, **kwargs)

    def start_decoding(self, src: Tensor) -> DecoderOnlyState:
        batch = src.size(0)
        src_tag = torch.full((batch, 1), self.src_tag_id, dtype=src.dtype, device=src.device)
        prefix = torch.cat([src_tag, src], dim=1)
        valid = prefix != self.pad_id
        positions = (valid.cumsum(dim=1) - 1).clamp(min=0)
        mask = self._mask(valid, prefix.size(1))
        caches: list[list[Tensor]] = [[] for _ in self.blocks]
        x = self._embed(prefix, positions)
        for block, cache in zip(self.blocks, caches):
            x = block(x, mask, cache)
        return DecoderOnlyState(caches, valid, valid.sum(dim=1), 0)

    def decode_step(self, state: DecoderOnlyState, tokens: Tensor) -> tuple[Tensor, DecoderOnlyState]:
        """The first step's token stands for the target-language tag, as BOS does elsewhere."""
        if state.step == 0:
            tokens = torch.full_like(tokens, self.tgt_tag_id)
        key_valid = torch.cat([state.key_valid, torch.ones_like(state.key_valid[:, :1])], dim=1)
        mask = key_valid[:, None, None, :]
        x = self._embed(tokens.unsqueeze(1), state.next_position.unsqueeze(1))
        caches = [list(cache) for cache in state.caches]
        for block, cache in zip(self.blocks, caches):
            x = block(x, mask, cache)
        logits = self.output(self.final_norm(x)).squeeze(1)
        return F.log_softmax(logits.float(), dim=-1), DecoderOnlyState(caches, key_valid, state.next_position + 1,
                                                                       state.step + 1)

    def reorder_state(self, state: DecoderOnlyState, order: Tensor, sentences: Tensor | None = None
                      ) -> DecoderOnlyState:
        return state.reorder(order)  # one state per row: the source is in each row's cache
