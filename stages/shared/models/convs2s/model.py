"""Convolutional sequence to sequence learning: Gehring et al. (2017), arXiv 1705.03122.

Encoder (section 3.2): token plus position embeddings, projected to the convolution
width; blocks of a convolution over a centred window of ``kernel_size`` positions
whose 2 x hidden outputs a gated linear unit halves (GLU: A ⊗ σ(B), section 3.2), each
with a residual connection; projected back to the embedding width. It hands the decoder
two things per source position: keys z_j (the last block's output) and values z_j + e_j
(plus the input embedding, section 3.3).

Decoder: the same blocks over the target with a causal window (the k - 1 positions
before, padded with zeros at the start), and in every block an attention step
(section 3.3): the block's output, projected to the embedding width and added to the
target embedding g_i, scores every key; the weighted sum of the values, scaled by
m·sqrt(1/m) for m valid source positions (section 3.4), is projected back and added to
the block's output. Residual sums are scaled by sqrt(0.5) throughout (section 3.4), and
the encoder's output gradient is divided by twice the decoder's attention steps, as the
paper scales it by their number. Initialization, and weight normalization (Salimans and
Kingma 2016) of every convolution and projection, as section 3.4. Without weight
normalization a 128-wide, six-block version diverged in configs/smoke.yaml, at the rates the other
families train with there (Adam under its noam schedule, peak 0.018): the loss went from
5.4 to 44 around update 80 and never came back. With it, the same run's loss rose to 9.4
there and was back at 5.5-5.7 by update 130.

Incremental decoding keeps, per decoder block, its last k - 1 inputs, so a step
computes the same products as the teacher-forced forward at that position.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.nn.utils.parametrizations import weight_norm

from stages.shared.models.convs2s.config import ConvS2SConfig
from stages.shared.models.dropout import Dropout

HALF = math.sqrt(0.5)  # residual sums keep their variance (section 3.4)


def _linear(in_features: int, out_features: int, dropout: float) -> nn.Module:
    """A projection whose output keeps its input's variance under dropout (section 3.4),
    weight-normalized per output unit."""
    layer = nn.Linear(in_features, out_features)
    nn.init.normal_(layer.weight, std=math.sqrt((1 - dropout) / in_features))
    nn.init.zeros_(layer.bias)
    return weight_norm(layer)


def _convolution(channels: int, kernel_size: int, dropout: float) -> nn.Module:
    """To 2 x channels for the GLU (the factor 4 makes up for the gate halving the
    variance), weight-normalized per output channel."""
    layer = nn.Conv1d(channels, 2 * channels, kernel_size)
    nn.init.normal_(layer.weight, std=math.sqrt(4 * (1 - dropout) / (kernel_size * channels)))
    nn.init.zeros_(layer.bias)
    return weight_norm(layer)


def _embedding(rows: int, dim: int, pad_id: int | None = None) -> nn.Embedding:
    table = nn.Embedding(rows, dim, padding_idx=pad_id)
    nn.init.normal_(table.weight, std=0.1)
    if pad_id is not None:
        nn.init.zeros_(table.weight[pad_id])
    return table


class Attention(nn.Module):
    """One decoder block's attention over the encoder output."""

    def __init__(self, hidden: int, embed_dim: int, dropout: float):
        super().__init__()
        self.in_projection = _linear(hidden, embed_dim, dropout)
        self.out_projection = _linear(embed_dim, hidden, dropout)

    def weights(self, x: Tensor, target_embedding: Tensor, keys: Tensor, src_valid: Tensor) -> Tensor:
        """(B, T, S): for each target position, its weights over the source."""
        query = (self.in_projection(x) + target_embedding) * HALF
        scores = torch.bmm(query, keys.transpose(1, 2)).masked_fill(~src_valid[:, None, :], float("-inf"))
        return torch.softmax(scores.float(), dim=-1).type_as(query)

    def weights_of_call(self, args: tuple, kwargs: dict) -> Tensor:
        """(B, 1 head, T, S): the weights of one ``forward`` call (a forward hook's view)."""
        bound = dict(zip(("x", "target_embedding", "keys", "values", "src_valid"), args), **kwargs)
        return self.weights(bound["x"], bound["target_embedding"], bound["keys"], bound["src_valid"])[:, None]

    def forward(self, x: Tensor, target_embedding: Tensor, keys: Tensor, values: Tensor, src_valid: Tensor) -> Tensor:
        attended = torch.bmm(self.weights(x, target_embedding, keys, src_valid), values)
        valid = src_valid.sum(dim=1, keepdim=True).type_as(attended)[:, :, None]
        attended = attended * (valid * valid.rsqrt())
        return (self.out_projection(attended) + x) * HALF


@dataclass
class ConvState:
    keys: Tensor  # (B, S, E)
    values: Tensor  # (B, S, E)
    src_valid: Tensor  # (B, S)
    windows: list[Tensor]  # per decoder block: its last k - 1 inputs (B, k - 1, H)
    position: int  # the next target position

    def reorder(self, order: Tensor) -> ConvState:
        return ConvState(self.keys.index_select(0, order), self.values.index_select(0, order),
                         self.src_valid.index_select(0, order),
                         [window.index_select(0, order) for window in self.windows], self.position)


class Encoder(nn.Module):
    def __init__(self, config: ConvS2SConfig, vocab: int, pad_id: int):
        super().__init__()
        c = config
        self.pad_id, self.kernel_size = pad_id, c.kernel_size
        self.embedding = _embedding(vocab, c.embed_dim, pad_id)
        self.positions = _embedding(c.max_positions, c.embed_dim)
        self.project_in = _linear(c.embed_dim, c.hidden, c.dropout)
        self.convolutions = nn.ModuleList(_convolution(c.hidden, c.kernel_size, c.dropout)
                                          for _ in range(c.encoder_layers))
        self.project_out = _linear(c.hidden, c.embed_dim, c.dropout)
        self.dropout = Dropout(c.dropout)
        self.gradient_scale = 1.0 / (2.0 * c.decoder_layers)

    def forward(self, src: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """Keys (B, S, E), values (B, S, E) and which positions are real (B, S)."""
        src_valid = src != self.pad_id
        padding = ~src_valid[:, :, None]
        embedded = self.dropout(self.embedding(src) + self.positions(torch.arange(src.size(1), device=src.device)))
        x = self.project_in(embedded)
        side = (self.kernel_size - 1) // 2
        for convolution in self.convolutions:
            residual = x
            # Padding is zero going into every convolution, as the zeros beyond the ends
            # are: a padded sentence's real positions see what they would see alone.
            x = self.dropout(x).masked_fill(padding, 0.0)
            x = F.glu(convolution(F.pad(x.transpose(1, 2), (side, side))), dim=1).transpose(1, 2)
            x = (x + residual) * HALF
        keys = self.project_out(x).masked_fill(padding, 0.0)
        # Forward unchanged; the gradient into the encoder divided (section 3.4).
        keys = keys * self.gradient_scale + keys.detach() * (1.0 - self.gradient_scale)
        return keys, (keys + embedded) * HALF, src_valid


class ConvS2STranslator(nn.Module):
    family = "convs2s"

    def __init__(self, config: ConvS2SConfig, src_vocab: int, tgt_vocab: int, pad_id: int = 0):
        super().__init__()
        c = config
        self.config, self.pad_id = config, pad_id
        self.encoder = Encoder(config, src_vocab, pad_id)
        self.tgt_embedding = _embedding(tgt_vocab, c.embed_dim, pad_id)
        self.tgt_positions = _embedding(c.max_positions, c.embed_dim)
        self.project_in = _linear(c.embed_dim, c.hidden, c.dropout)
        self.convolutions = nn.ModuleList(_convolution(c.hidden, c.kernel_size, c.dropout)
                                          for _ in range(c.decoder_layers))
        self.attentions = nn.ModuleList(Attention(c.hidden, c.embed_dim, c.dropout) for _ in range(c.decoder_layers))
        self.project_out = _linear(c.hidden, c.out_embed_dim, c.dropout)
        self.dropout = Dropout(c.dropout)
        self.output = nn.Linear(c.out_embed_dim, tgt_vocab)
        nn.init.normal_(self.output.weight, std=math.sqrt((1 - c.dropout) / c.out_embed_dim))
        nn.init.zeros_(self.output.bias)
        if c.share_embeddings:
            self.output.weight = self.tgt_embedding.weight

    def _embed_target(self, tokens: Tensor, first_position: int) -> Tensor:
        positions = torch.arange(first_position, first_position + tokens.size(1), device=tokens.device)
        return self.dropout(self.tgt_embedding(tokens) + self.tgt_positions(positions))

    def _block(self, layer: int, x: Tensor, window: Tensor, target_embedding: Tensor, state: ConvState) -> Tensor:
        """Block ``layer`` for the T positions of its input ``x`` (B, T, H), whose causal
        window ``window`` (B, k - 1 + T, H) holds the k - 1 inputs before them, dropped out."""
        residual = x
        x = F.glu(self.convolutions[layer](window.transpose(1, 2)), dim=1).transpose(1, 2)
        x = self.attentions[layer](x, target_embedding, state.keys, state.values, state.src_valid)
        return (x + residual) * HALF

    def _logits(self, x: Tensor) -> Tensor:
        return self.output(self.dropout(self.project_out(x)))

    def start_decoding(self, src: Tensor) -> ConvState:
        keys, values, src_valid = self.encoder(src)
        empty = keys.new_zeros(src.size(0), self.config.kernel_size - 1, self.config.hidden)
        return ConvState(keys, values, src_valid, [empty] * self.config.decoder_layers, 0)

    def forward(self, src: Tensor, tgt_in: Tensor) -> Tensor:
        state = self.start_decoding(src)
        target_embedding = self._embed_target(tgt_in, 0)
        x = self.project_in(target_embedding)
        for layer in range(self.config.decoder_layers):
            window = torch.cat([state.windows[layer], self.dropout(x)], dim=1)
            x = self._block(layer, x, window, target_embedding, state)
        return self._logits(x)

    def decode_step(self, state: ConvState, tokens: Tensor) -> tuple[Tensor, ConvState]:
        target_embedding = self._embed_target(tokens[:, None], state.position)
        x, windows = self.project_in(target_embedding), []
        for layer in range(self.config.decoder_layers):
            window = torch.cat([state.windows[layer], self.dropout(x)], dim=1)
            windows.append(window[:, 1:])
            x = self._block(layer, x, window, target_embedding, state)
        log_probs = F.log_softmax(self._logits(x)[:, 0].float(), dim=-1)
        return log_probs, ConvState(state.keys, state.values, state.src_valid, windows, state.position + 1)

    def reorder_state(self, state: ConvState, order: Tensor, sentences: Tensor | None = None) -> ConvState:
        return state.reorder(order)  # one state per row
