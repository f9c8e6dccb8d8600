"""A model of a family, from its preset and settings and the vocabulary it is built for."""

from __future__ import annotations

from torch import nn

from stages.models.decoder_only import DecoderOnlyTranslator
from stages.models.presets import resolve_preset
from stages.models.rnn import RnnTranslator
from stages.models.transformer import Transformer


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
