"""The tokenize stage's config: how the token-id shards are cut."""

from __future__ import annotations

from pydantic import Field

from pipeline.core.section import Section


class TokenizeConfig(Section):
    """The splits as SentencePiece ids in Arrow shards, with length histograms."""

    shards: int = Field(default=4, gt=0)  # Arrow files per split
    append_eos: bool = True  # EOS after every sentence (training needs it: models learn where a translation ends)
    histogram_bin_width: int = Field(default=8, gt=0)  # tokens per bin of index.json's length histograms
