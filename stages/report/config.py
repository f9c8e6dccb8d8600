"""The report stage's config: which experiment and models it compares."""

from __future__ import annotations

from pipeline.core.section import Section


class ReportStageConfig(Section):
    """The report stage's slice: the experiment and its models, in config order."""

    experiment: str
    models: list[str]  # the trained runs, as train/<name> and evaluate/<name> name them
    # A run's configured model, for runs made by the experiment's seeds or budgets: the
    # report groups the seeds of one model and draws one line per family over budgets.
    run_of: dict[str, str] = {}
    # The tune stages whose chosen learning rates the report shows (tune/<model size>).
    tuned: list[str] = []
