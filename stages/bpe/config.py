"""The bpe stage's config: the SentencePiece model(s) to train."""

from __future__ import annotations

from pydantic import Field

from pipeline.section import Section


class BpeConfig(Section):
    vocab_size: int = Field(default=8000, gt=10)
    joint: bool = True
    character_coverage: float = Field(default=1.0, gt=0.0, le=1.0)
    input_sentence_size: int = Field(default=2_000_000, gt=0)
    language_tags: bool = True
    user_symbols: list[str] = []
    seed: int = 1
    threads: int = Field(default=2, gt=0)
