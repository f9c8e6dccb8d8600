"""The bpe stage's config: the SentencePiece model(s) to train."""

from __future__ import annotations

from pydantic import Field

from pipeline.core.section import Section


class BpeConfig(Section):
    """SentencePiece BPE over the cleaned training split, with fixed special ids (pad 0,
    unk 1, bos 2, eos 3)."""

    vocab_size: int = Field(default=8000, gt=10)  # pieces per model
    joint: bool = True  # one model for both languages (the decoder-only family needs it); else one per side
    character_coverage: float = Field(default=1.0, gt=0.0, le=1.0)  # SentencePiece's; below 1 for large alphabets
    # Sentences a model is trained on; a larger corpus is sampled (with seed) as it is read.
    input_sentence_size: int = Field(default=2_000_000, gt=0)
    language_tags: bool = True  # __en__, __de__ as single pieces (the decoder-only family's prompt)
    user_symbols: list[str] = []  # more strings kept as single pieces
    seed: int = 1  # of the sample
    threads: int = Field(default=2, gt=0)  # SentencePiece's training threads
