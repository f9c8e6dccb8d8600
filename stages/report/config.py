"""The report stage's config: which experiment and models it compares."""

from __future__ import annotations

from pipeline.section import Section


class ReportStageConfig(Section):
    """The report stage's slice: the experiment and its models, in config order."""

    experiment: str
    models: list[str]
