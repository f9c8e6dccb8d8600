"""The clean stage's config: normalization and the filters of the training split."""

from __future__ import annotations

from typing import ClassVar, Literal

from pydantic import Field

from pipeline.core.section import Section


class CleanConfig(Section):
    """Filters for the training split; valid and test are only normalized.

    Defaults follow Moses' clean-corpus-n.perl (1-80 words, ratio 9) loosened to
    250 words, the usual setting for subword-level NMT.
    """

    unicode_form: Literal["NFC", "NFKC", "none"] = "NFC"  # Unicode normalization of every split
    min_words: int = Field(default=1, ge=0)  # pairs with a side of fewer words are dropped
    max_words: int = Field(default=250, gt=0)  # pairs with a side of more words are dropped
    max_chars: int = Field(default=2000, gt=0)  # pairs with a side of more characters are dropped
    max_length_ratio: float = Field(default=9.0, gt=1.0)  # longer side / shorter side, in words
    drop_duplicates: bool = True  # exact duplicate pairs, across the whole split
    drop_identical: bool = True  # pairs whose source equals their target (often untranslated)
    langid: bool = False  # drop pairs whose target is not in tgt_lang (py3langid)
    langid_min_chars: int = Field(default=20, ge=0)  # shorter targets are not judged by langid
    # The training split is cleaned by parallel tasks of this many pairs each.
    rows_per_task: int = Field(default=200_000, gt=0)

    NOT_IN_KEY: ClassVar[frozenset[str]] = frozenset({"rows_per_task"})
