"""The three model families behind one interface, used by training and beam search:

- ``model(src, tgt_in) -> logits (B, T, V)``: the teacher-forced forward;
- ``model.start_decoding(src) -> state``: encode the source once;
- ``model.decode_step(state, tokens) -> (log_probs (B, V), state)``: one incremental step;
- ``model.reorder_state(state, order, sentences=None) -> state``: follow the beams that
  survived: rows ``order`` of the state, which belong to its sentences ``sentences``
  (a family may keep what all beams of a sentence share once per sentence).
"""

from __future__ import annotations

from torch import nn

from stages.train.models.decoder_only import DecoderOnlyTranslator
from stages.train.models.presets import resolve_preset
from stages.train.models.rnn import RnnTranslator
from stages.train.models.transformer import Transformer


def build_model(family: str, preset: str, settings: dict, src_vocab: int, tgt_vocab: int,
                language_tag_ids: tuple[int, int] = (4, 5), pad_id: int = 0) -> nn.Module:
    """``language_tag_ids`` (source, target) are used by the decoder-only family only."""
    config = resolve_preset(family, preset, settings)
    if family == "transformer":
        return Transformer(config, src_vocab, tgt_vocab, pad_id)
    if family == "rnn":
        return RnnTranslator(config, src_vocab, tgt_vocab, pad_id)
    if src_vocab != tgt_vocab:
        raise ValueError("the decoder-only family needs a joint vocabulary (bpe.joint: true)")
    return DecoderOnlyTranslator(config, src_vocab, *language_tag_ids, pad_id=pad_id)
