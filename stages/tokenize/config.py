"""The tokenize stage's config: how the token-id shards are cut."""

from __future__ import annotations

from pydantic import Field

from pipeline.section import Section


class TokenizeConfig(Section):
    shards: int = Field(default=4, gt=0)
    append_eos: bool = True
    histogram_bin_width: int = Field(default=8, gt=0)
