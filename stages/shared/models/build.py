"""A model of a family, from its preset and settings and the vocabulary it is built for."""

from __future__ import annotations

from torch import nn

from stages.shared.models.families import family


def build_model(family_name: str, preset: str, settings: dict, src_vocab: int, tgt_vocab: int,
                language_tag_ids: tuple[int, int] = (4, 5), pad_id: int = 0) -> nn.Module:
    """``language_tag_ids`` (source, target) are used by a family that reads tagged
    sequences (the decoder-only one)."""
    record = family(family_name)
    record.check_vocabularies(src_vocab, tgt_vocab)
    return record.build(record.resolve(preset, settings), src_vocab, tgt_vocab, language_tag_ids, pad_id)
