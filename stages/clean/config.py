"""The clean stage's config: normalization and the filters of the training split."""

from __future__ import annotations

from typing import ClassVar, Literal

from pydantic import Field

from pipeline.section import Section


class CleanConfig(Section):
    """Filters for the training split; valid and test are only normalized.

    Defaults follow Moses' clean-corpus-n.perl (1-80 words, ratio 9) loosened to
    250 words, the usual setting for subword-level NMT.
    """

    unicode_form: Literal["NFC", "NFKC", "none"] = "NFC"
    min_words: int = Field(default=1, ge=0)
    max_words: int = Field(default=250, gt=0)
    max_chars: int = Field(default=2000, gt=0)
    max_length_ratio: float = Field(default=9.0, gt=1.0)
    drop_duplicates: bool = True
    drop_identical: bool = True
    langid: bool = False
    langid_min_chars: int = Field(default=20, ge=0)
    # The training split is cleaned by parallel tasks of this many pairs each.
    rows_per_task: int = Field(default=200_000, gt=0)

    NOT_IN_KEY: ClassVar[frozenset[str]] = frozenset({"rows_per_task"})
