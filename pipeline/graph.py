"""The stage graph: which stages exist, what they depend on, and what a run will do.

``pipeline_stages`` is the one place the graph is written down: the data stages in a
line, then one train and one evaluate stage per model, joined by the report. ``plan``
computes every stage's artifact key up front (keys depend only on config and upstream
keys, never on outputs) and checks the store: a stage whose artifact verifies is a
cache hit and does no work. ``pipeline/runner.py`` executes a plan on Ray.

To add a stage: copy a stage package under ``stages/`` (``pipeline/stage.py`` says
what one holds), give it a section in ``ExperimentConfig``, and add its line below.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from operator import attrgetter

from pipeline.core.artifacts import (
    ArtifactState,
    ArtifactStatus,
    ArtifactStore,
    artifact_key,
)
from pipeline.config import ExperimentConfig
from pipeline.core.hardware import HardwareError
from pipeline.core.section import Section, key_exclusions
from pipeline.stage import Stage
from stages import bpe, clean, download, evaluate, report, select, tokenize, train, tune
from stages.shared.models.spec import ModelSpec
from stages.shared.names import evaluate_stage, train_stage

DATA_STAGES = (
    Stage.of(download, "download", attrgetter("download")),
    Stage.of(clean, "clean", attrgetter("clean"), upstream=("download",)),
    Stage.of(bpe, "bpe", attrgetter("bpe"), upstream=("clean",)),
    Stage.of(tokenize, "tokenize", attrgetter("tokenize"), upstream=("clean", "bpe")),
)


def pipeline_stages(config: ExperimentConfig) -> tuple[Stage, ...]:
    """The stages of a config, in an order where every stage follows its upstream.
    After tokenization the graph fans out, one train and one evaluate stage per trained
    run (a model, or each of its seeds and budgets), and joins again in the report.
    With a select section, the candidates' runs train first and join in one select
    stage per model; the runs that confirm its choice, once settled, are the ones
    evaluated and reported (``pipeline/selection.py`` says which round a store is at)."""
    runs, candidates = config.trained_models(), config.selection_runs()
    if not runs and not candidates:
        return DATA_STAGES
    # With a tune section, each model size's learning rate is chosen first (with
    # tune.budget_fraction, at each budget's own trial budget).
    tuning = tuple(Stage.of(tune, name, functools.partial(_tune_slice, sized, budget), upstream=("tokenize",))
                   for name, sized, budget in config.tunings())
    # With branch_budgets, the stable-phase segments come first (each continues the one
    # before it), and each budget's run continues its segment.
    training = tuple(Stage.of(train, train_stage(model.name), functools.partial(_train_slice, model),
                              upstream=("tokenize", *[name for name in (model.lr_from, model.start_from) if name]))
                     for model in config.stable_segments() + runs + candidates)
    selection = tuple(Stage.of(select, name, functools.partial(_select_slice, name),
                               upstream=("clean", *(train_stage(run.run) for run in section.runs)))
                      for name, section in config.select_stage_configs())
    if not runs and config.chosen is None:  # still selecting: the report waits for the runs that confirm
        return DATA_STAGES + tuning + training + selection
    evaluation = tuple(Stage.of(evaluate, evaluate_stage(model.name), functools.partial(_evaluate_slice, model),
                                upstream=("clean", train_stage(model.name)))
                       for model in runs)
    reporting = Stage.of(report, "report", ExperimentConfig.report_stage_config,
                         upstream=("tokenize", *(stage.name for stage in tuning + selection),
                                   *(train_stage(model.name) for model in runs),
                                   *(stage.name for stage in evaluation)))
    return DATA_STAGES + tuning + training + selection + evaluation + (reporting,)


def _tune_slice(sized: ModelSpec, budget: float, config: ExperimentConfig):
    return config.tune_stage_config(sized, budget)


def _select_slice(name: str, config: ExperimentConfig):
    return dict(config.select_stage_configs())[name]


def _train_slice(model: ModelSpec, config: ExperimentConfig):
    return config.train_stage_config(model)


def _evaluate_slice(model: ModelSpec, config: ExperimentConfig):
    return config.evaluate_stage_config(model)


@dataclass(frozen=True)
class PlannedStage:
    stage: Stage
    # The stage's config slice, validated once here and handed to the stage as it is.
    section: Section
    key: str
    upstream_keys: dict[str, str]
    status: ArtifactStatus
    will_run: bool


def find_stage(planned: list[PlannedStage], name: str) -> PlannedStage:
    """The planned stage called ``name`` (``tokenize``, ``train_stage(model)``, ...)."""
    for item in planned:
        if item.stage.name == name:
            return item
    raise KeyError(f"no stage {name!r} in this plan; stages are: {', '.join(i.stage.name for i in planned)}")


def stage_key_inputs(stage: Stage, section: Section) -> dict:
    """The config slice a stage's key is computed from, plus what its ``fingerprint``
    says about inputs outside the store (e.g. local corpus files)."""
    slice_ = section.model_dump(mode="json", exclude=key_exclusions(section))
    if stage.fingerprint is not None:
        slice_["local_files"] = stage.fingerprint(section)
    return slice_


def plan(config: ExperimentConfig, store: ArtifactStore, until: str | None = None,
         force: tuple[str, ...] = (), verify: bool = False) -> list[PlannedStage]:
    """Keys and states of the config's stages, up to ``until`` (a stage, or ``train`` for
    every train stage); ``force`` names stages (or ``train``) to recompute with their
    downstream. ``verify`` re-hashes every cached file instead of trusting the listing."""
    stages = pipeline_stages(config)
    names = [stage.name for stage in stages] + sorted({stage.group for stage in stages} - {s.name for s in stages})
    for name in [*force, *([until] if until else [])]:
        if name not in names:
            raise ValueError(f"unknown stage {name!r}; stages are: {', '.join(names)}")
    if until is not None:
        last = max(index for index, stage in enumerate(stages) if until in (stage.name, stage.group))
        stages = stages[:last + 1]
    keys: dict[str, str] = {}
    forced: set[str] = {stage.name for stage in stages if stage.name in force or stage.group in force}
    planned = []
    for stage in stages:
        upstream_keys = {name: keys[name] for name in stage.upstream}
        section = stage.config_of(config)
        key = artifact_key(stage.name, stage.version, stage_key_inputs(stage, section), upstream_keys)
        keys[stage.name] = key
        # Forcing a stage forces everything downstream of it too.
        if forced & set(stage.upstream):
            forced.add(stage.name)
        status = store.status(stage.name, key, verify=verify)
        will_run = stage.name in forced or status.state != ArtifactState.CACHED
        planned.append(PlannedStage(stage, section, key, upstream_keys, status, will_run))
    return planned


def preflight(planned: list[PlannedStage], cpus: int) -> None:
    """Check every stage that will run against this machine (``Stage.preflight``);
    raise HardwareError naming the stage and the config key."""
    for item in planned:
        if item.will_run and item.stage.preflight is not None:
            try:
                item.stage.preflight(item.section, cpus)
            except HardwareError as error:
                raise HardwareError(f"{item.stage.name}: {error}") from None
