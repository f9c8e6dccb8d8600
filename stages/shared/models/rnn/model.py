"""Attention RNN encoder-decoder: Bahdanau et al. (2015), "Neural machine translation by
jointly learning to align and translate", and Luong et al. (2015), "Effective approaches
to attention-based neural machine translation".

Encoder: a bidirectional multi-layer LSTM or GRU (each direction hidden/2 wide, so the
annotations h_j are ``hidden`` wide, Bahdanau section 3.2). Decoder, as Luong (section
3): an LSTM or GRU whose input is the previous target embedding concatenated with the
previous attentional vector (input feeding, section 3.3); attention over the
annotations from the top decoder state s_t; attentional vector
h~_t = tanh(W_c [c_t; s_t]) (``attentional_dim`` wide: nmtpytorch narrows it to the
embedding width so that W_o can be the target embedding); output softmax(W_o h~_t). Scores: additive
v^T tanh(W s_t + U h_j) (Bahdanau), general s_t^T W_a h_j or dot s_t^T h_j (Luong).
The initial decoder state is tanh(W [forward final; backward final]) per layer
(Bahdanau, appendix A.2.2); layers beyond the encoder's depth start from the top one.

The teacher-forced forward runs the same ``_step`` as incremental decoding, so the
two agree by construction; it applies W_o once to all steps' attentional vectors, as
one large product is cheaper than one per step (W_o is most of an update's FLOPs).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from stages.shared.models.dropout import Dropout
from stages.shared.models.rnn.config import RnnConfig


class Attention(nn.Module):
    def __init__(self, kind: str, hidden: int):
        super().__init__()
        self.kind = kind
        if kind == "additive":
            self.query = nn.Linear(hidden, hidden, bias=False)
            self.key = nn.Linear(hidden, hidden)  # U h_j: computed once per source
            self.score = nn.Linear(hidden, 1, bias=False)
        elif kind == "general":
            self.key = nn.Linear(hidden, hidden, bias=False)  # W_a h_j: computed once per source
        elif kind != "dot":
            raise ValueError(f"unknown attention {kind!r}")

    def precompute(self, annotations: Tensor) -> Tensor:
        return annotations if self.kind == "dot" else self.key(annotations)

    def weights(self, state: Tensor, keys: Tensor, src_valid: Tensor) -> Tensor:
        """Attention weights alpha_t (B, S) over the annotations for decoder state s_t (B, H)."""
        if self.kind == "additive":
            scores = self.score(torch.tanh(self.query(state).unsqueeze(1) + keys)).squeeze(2)
        else:
            scores = torch.bmm(keys, state.unsqueeze(2)).squeeze(2)
        return torch.softmax(scores.masked_fill(~src_valid, float("-inf")), dim=1)

    def weights_of_call(self, args: tuple, kwargs: dict) -> Tensor:
        """(B, 1 head, 1 query, S): the weights of one ``forward`` call (a forward hook's
        view), for the one target step it attends for."""
        bound = dict(zip(("state", "keys", "annotations", "src_valid"), args), **kwargs)
        return self.weights(bound["state"], bound["keys"], bound["src_valid"])[:, None, None, :]

    def forward(self, state: Tensor, keys: Tensor, annotations: Tensor, src_valid: Tensor) -> Tensor:
        """Context vector c_t (B, H) for decoder state s_t (B, H)."""
        weights = self.weights(state, keys, src_valid)
        return torch.bmm(weights.unsqueeze(1), annotations).squeeze(1)


@dataclass
class RnnState:
    hidden: Tensor  # (layers, B, H)
    cell: Tensor | None  # (layers, B, H) for LSTM
    input_feed: Tensor  # (B, H): the previous attentional vector
    annotations: Tensor  # (B, S, H)
    keys: Tensor  # (B, S, H): annotations as the attention scores need them
    src_valid: Tensor  # (B, S)

    def reorder(self, order: Tensor) -> RnnState:
        return RnnState(self.hidden.index_select(1, order),
                        None if self.cell is None else self.cell.index_select(1, order),
                        self.input_feed.index_select(0, order), self.annotations.index_select(0, order),
                        self.keys.index_select(0, order), self.src_valid.index_select(0, order))


class RnnTranslator(nn.Module):
    family = "rnn"

    def __init__(self, config: RnnConfig, src_vocab: int, tgt_vocab: int, pad_id: int = 0):
        super().__init__()
        attentional_dim = config.attentional_dim or config.hidden  # RnnConfig checked the widths
        self.config, self.pad_id, self.attentional_dim = config, pad_id, attentional_dim
        recurrent = nn.LSTM if config.cell == "lstm" else nn.GRU
        self.src_embedding = nn.Embedding(src_vocab, config.embed_dim, padding_idx=pad_id)
        self.tgt_embedding = nn.Embedding(tgt_vocab, config.embed_dim, padding_idx=pad_id)
        self.encoder = recurrent(config.embed_dim, config.hidden // 2, num_layers=config.encoder_layers,
                                 bidirectional=True, batch_first=True,
                                 dropout=config.dropout if config.encoder_layers > 1 else 0.0)
        self.bridge = nn.Linear(config.hidden, config.hidden)
        self.decoder = recurrent(config.embed_dim + attentional_dim, config.hidden, num_layers=config.decoder_layers,
                                 batch_first=True, dropout=config.dropout if config.decoder_layers > 1 else 0.0)
        self.attention = Attention(config.attention, config.hidden)
        self.combine = nn.Linear(2 * config.hidden, attentional_dim, bias=False)
        self.dropout = Dropout(config.dropout)
        self.output = nn.Linear(attentional_dim, tgt_vocab)
        if config.tie_embeddings:
            self.output.weight = self.tgt_embedding.weight

    def start_decoding(self, src: Tensor) -> RnnState:
        src_valid = src != self.pad_id
        lengths = src_valid.sum(dim=1).clamp(min=1).cpu()
        embedded = self.dropout(self.src_embedding(src))
        packed = nn.utils.rnn.pack_padded_sequence(embedded, lengths, batch_first=True, enforce_sorted=False)
        outputs, final = self.encoder(packed)
        annotations, _ = nn.utils.rnn.pad_packed_sequence(outputs, batch_first=True, total_length=src.size(1))
        final_hidden = final[0] if isinstance(final, tuple) else final
        hidden = self._initial_state(final_hidden)
        cell = self._initial_state(final[1]) if isinstance(final, tuple) else None
        input_feed = annotations.new_zeros(src.size(0), self.attentional_dim)
        return RnnState(hidden, cell, input_feed, annotations, self.attention.precompute(annotations), src_valid)

    def _initial_state(self, final: Tensor) -> Tensor:
        # final: (encoder_layers * 2, B, H/2), directions interleaved per layer.
        layers = final.view(self.config.encoder_layers, 2, final.size(1), -1)
        per_layer = torch.tanh(self.bridge(torch.cat([layers[:, 0], layers[:, 1]], dim=2)))
        if self.config.decoder_layers <= self.config.encoder_layers:
            return per_layer[-self.config.decoder_layers:].contiguous()
        extra = per_layer[-1:].expand(self.config.decoder_layers - self.config.encoder_layers, -1, -1)
        return torch.cat([per_layer, extra], dim=0).contiguous()

    def _step(self, state: RnnState, tokens: Tensor) -> RnnState:
        """One decoder step; the new state's input_feed is the attentional vector h~_t."""
        embedded = self.dropout(self.tgt_embedding(tokens))
        step_input = torch.cat([embedded, state.input_feed], dim=1).unsqueeze(1)
        recurrent_state = (state.hidden, state.cell) if state.cell is not None else state.hidden
        output, new_state = self.decoder(step_input, recurrent_state)
        top = output.squeeze(1)
        context = self.attention(top, state.keys, state.annotations, state.src_valid)
        attentional = self.dropout(torch.tanh(self.combine(torch.cat([context, top], dim=1))))
        hidden, cell = new_state if isinstance(new_state, tuple) else (new_state, None)
        return RnnState(hidden, cell, attentional, state.annotations, state.keys, state.src_valid)

    def forward(self, src: Tensor, tgt_in: Tensor) -> Tensor:
        state = self.start_decoding(src)
        attentional = []
        for t in range(tgt_in.size(1)):
            state = self._step(state, tgt_in[:, t])
            attentional.append(state.input_feed)
        return self.output(torch.stack(attentional, dim=1))

    def decode_step(self, state: RnnState, tokens: Tensor) -> tuple[Tensor, RnnState]:
        state = self._step(state, tokens)
        return F.log_softmax(self.output(state.input_feed).float(), dim=-1), state

    def reorder_state(self, state: RnnState, order: Tensor, sentences: Tensor | None = None) -> RnnState:
        return state.reorder(order)  # one state per row
