"""The report stage's config: which experiment and models it compares, and which of its
comparisons are primary."""

from __future__ import annotations

from pydantic import field_validator

from pipeline.core.section import Section


class ReportConfig(Section):
    """What the report gives verdicts on. Every pair of models at one budget is tested;
    only the primary comparisons get a verdict, Holm-adjusted among themselves, and the
    rest are shown as exploratory (docs/comparing.md)."""

    # Pairs of configured models ([a, b], as `models:` names them; with sizes,
    # <model>.<size>) to compare at every budget where both were trained. []: each
    # family's best size by validation loss against each other family's best.
    primary_comparisons: list[list[str]] = []

    @field_validator("primary_comparisons")
    @classmethod
    def _pairs(cls, value: list[list[str]]) -> list[list[str]]:
        for pair in value:
            if len(pair) != 2 or pair[0] == pair[1]:
                raise ValueError(f"each comparison names two different models, [a, b]; got {pair}")
        return value


class ReportStageConfig(Section):
    """The report stage's slice: the experiment and its models, in config order."""

    experiment: str
    models: list[str]  # the trained runs, as train/<name> and evaluate/<name> name them
    # A run's configured model, for runs made by the experiment's seeds or budgets: the
    # report groups the seeds of one model, and the sizes of a family at each budget.
    run_of: dict[str, str] = {}
    # The tune stages whose chosen learning rates the report shows (tune/<model size>).
    tuned: list[str] = []
    # The select stages whose choices the report shows (select/<model>).
    selected: list[str] = []
    # The config's report.primary_comparisons.
    primary_comparisons: list[list[str]] = []
