"""The stage graph: which stages exist, what they depend on, and how a run executes.

``plan`` computes every stage's artifact key up front (keys depend only on config
and upstream keys, never on outputs) and checks the store: a stage whose artifact
verifies is a cache hit and does no work. ``run_pipeline`` submits the rest as Ray
tasks, each receiving its upstream tasks' ObjectRefs as arguments, so Ray starts a
stage as soon as its inputs exist and runs independent stages in parallel. The
driver waits on the refs and records each finished stage in MLflow.
"""

from __future__ import annotations

import functools
import logging
import os
import time
from dataclasses import dataclass, field
from operator import attrgetter
from typing import Callable

from pipeline.artifacts import ArtifactState, ArtifactStatus, ArtifactStore, artifact_key
from pipeline.config import ExperimentConfig, ModelSpec, Section
from pipeline.context import StageContext, ray_parallel_map, ray_progress
from pipeline.hardware import CPU_BF16_ENV, HardwareError
from stages import bpe, clean, download, evaluate, report, tokenize
from stages.names import evaluate_stage, train_stage
from stages.train import stage as train

log = logging.getLogger("nmt")


@dataclass(frozen=True)
class Stage:
    name: str
    config_of: Callable[[ExperimentConfig], Section]  # the stage's slice of the config
    run: Callable  # (inputs: dict[str, Path], config, output: Path, ctx: StageContext) -> metrics dict
    version: int  # bump when the same inputs would now give a different artifact
    upstream: tuple[str, ...] = ()
    # A resumable stage gets back the staging directory a crashed attempt left behind.
    resumable: bool = False
    # For inputs outside the artifact store: section -> data that changes when they do.
    fingerprint: Callable | None = None
    # CPUs the stage's own Ray task holds. Training holds none: its Ray Train workers
    # ask for their own, and a waiting driver task must not starve them.
    task_cpus: float = 1
    # Files of the artifact (glob patterns) also logged to the stage's MLflow run.
    mlflow_files: tuple[str, ...] = ()
    # (section, cpus) -> None, or raises HardwareError: what this machine cannot run,
    # refused before a local run starts anything.
    preflight: Callable | None = None

    @property
    def group(self) -> str:
        """``train`` for ``train/<model>``; a stage's own name otherwise."""
        return self.name.split("/", 1)[0]


DATA_STAGES = (
    Stage("download", attrgetter("download"), download.download_corpus, download.VERSION,
          fingerprint=download.local_file_fingerprints),
    Stage("clean", attrgetter("clean"), clean.clean_corpus, clean.VERSION, ("download",)),
    Stage("bpe", attrgetter("bpe"), bpe.train_bpe, bpe.VERSION, ("clean",)),
    Stage("tokenize", attrgetter("tokenize"), tokenize.tokenize_corpus, tokenize.VERSION, ("clean", "bpe")),
)


def _train_slice(model: ModelSpec, config: ExperimentConfig):
    return config.train_stage_config(model)


def _evaluate_slice(model: ModelSpec, config: ExperimentConfig):
    return config.evaluate_stage_config(model)


def pipeline_stages(config: ExperimentConfig) -> tuple[Stage, ...]:
    """The stages of a config, in an order where every stage follows its upstream.
    After tokenization the graph fans out, one train and one evaluate stage per model,
    and joins again in the report."""
    if not config.models:
        return DATA_STAGES
    training = tuple(
        Stage(train_stage(model.name), functools.partial(_train_slice, model), train.train_model, train.VERSION,
              ("tokenize",), resumable=True, task_cpus=0, mlflow_files=("train_report.json", "metrics.jsonl"),
              preflight=train.preflight)
        for model in config.models)
    evaluation = tuple(
        Stage(evaluate_stage(model.name), functools.partial(_evaluate_slice, model), evaluate.evaluate_model,
              evaluate.VERSION, ("clean", train_stage(model.name)), mlflow_files=("*.txt", "nbest.jsonl", "scores.json"),
              preflight=evaluate.preflight)
        for model in config.models)
    reporting = Stage("report", ExperimentConfig.report_stage_config, report.report_models, report.VERSION,
                      tuple(stage.name for stage in training + evaluation),
                      mlflow_files=("report.*", "*.png"))
    return DATA_STAGES + training + evaluation + (reporting,)


@dataclass(frozen=True)
class PlannedStage:
    stage: Stage
    key: str
    upstream_keys: dict[str, str]
    status: ArtifactStatus
    will_run: bool


@dataclass
class StageResult:
    name: str
    key: str
    cache_hit: bool
    metrics: dict = field(default_factory=dict)
    started: float = 0.0
    ended: float = 0.0
    size_bytes: int = 0


def find_stage(planned: list[PlannedStage], name: str) -> PlannedStage:
    """The planned stage called ``name`` (``tokenize``, ``train_stage(model)``, ...)."""
    for item in planned:
        if item.stage.name == name:
            return item
    raise KeyError(f"no stage {name!r} in this plan; stages are: {', '.join(i.stage.name for i in planned)}")


def stage_key_inputs(stage: Stage, config: ExperimentConfig) -> dict:
    """The config slice a stage's key is computed from, plus what its ``fingerprint``
    says about inputs outside the store (e.g. local corpus files)."""
    section = stage.config_of(config)
    slice_ = section.model_dump(mode="json")
    if stage.fingerprint is not None:
        slice_["local_files"] = stage.fingerprint(section)
    return slice_


def plan(config: ExperimentConfig, store: ArtifactStore, until: str | None = None,
         force: tuple[str, ...] = ()) -> list[PlannedStage]:
    """Keys and states of the config's stages, up to ``until`` (a stage, or ``train`` for
    every train stage); ``force`` names stages (or ``train``) to recompute with their
    downstream."""
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
        key = artifact_key(stage.name, stage.version, stage_key_inputs(stage, config), upstream_keys)
        keys[stage.name] = key
        # Forcing a stage forces everything downstream of it too.
        if forced & set(stage.upstream):
            forced.add(stage.name)
        status = store.status(stage.name, key)
        will_run = stage.name in forced or status.state != ArtifactState.CACHED
        planned.append(PlannedStage(stage, key, upstream_keys, status, will_run))
    return planned


def preflight(config: ExperimentConfig, planned: list[PlannedStage], cpus: int) -> None:
    """Check every stage that will run against this machine (``Stage.preflight``);
    raise HardwareError naming the stage and the config key."""
    for item in planned:
        if item.will_run and item.stage.preflight is not None:
            try:
                item.stage.preflight(item.stage.config_of(config), cpus)
            except HardwareError as error:
                raise HardwareError(f"{item.stage.name}: {error}") from None


def execute_stage(stage: Stage, section, key: str, upstream_keys: dict[str, str], store: ArtifactStore,
                  mirrors: list[str], metrics_sink: Callable | None, *upstream_results: StageResult) -> StageResult:
    """Run one stage and commit its artifact; the body of each stage's Ray task.

    ``upstream_results`` are not read: passing the upstream ObjectRefs as arguments is
    what makes Ray wait for those stages before starting this one.
    """
    started = time.time()
    inputs = {name: store.local_path(name, upstream_key) for name, upstream_key in upstream_keys.items()}
    staging = store.staging_dir(stage.name, key, keep_previous=stage.resumable)
    fetchers = {name: functools.partial(store.local_path, name, upstream_key)
                for name, upstream_key in upstream_keys.items()}
    ctx = StageContext(parallel_map=ray_parallel_map, progress=ray_progress, mirrors=mirrors, input_fetchers=fetchers,
                       metrics_sink=metrics_sink)
    metrics = stage.run(inputs, section, staging, ctx)
    status = store.commit(stage.name, key, staging, {
        "version": stage.version, "config": section.model_dump(mode="json"),
        "upstream": upstream_keys, "metrics": metrics,
    })
    return StageResult(stage.name, key, False, metrics, started, time.time(), status.size_bytes)


def connect_ray(address: str | None) -> None:
    """Join the cluster at ``address`` (or RAY_ADDRESS), else start an embedded local instance."""
    import ray

    if ray.is_initialized():
        return
    # Train stages that wait for CPUs or GPUs held by other train stages are normal
    # here, not a startup failure to report every minute.
    runtime_env: dict = {"env_vars": {"RAY_TRAIN_WORKER_GROUP_START_TIMEOUT_S": str(7 * 24 * 3600)}}
    if CPU_BF16_ENV in os.environ:  # workers on other nodes decide precision as this driver was told to
        runtime_env["env_vars"][CPU_BF16_ENV] = os.environ[CPU_BF16_ENV]
    if address or os.environ.get("RAY_ADDRESS"):
        import pipeline
        import stages

        # Ship this checkout's code to the cluster so its workers run what the driver runs.
        runtime_env["py_modules"] = [pipeline, stages]
    ray.init(address=address, runtime_env=runtime_env, logging_level=logging.WARNING, log_to_driver=True)


def run_pipeline(config: ExperimentConfig, planned: list[PlannedStage], store: ArtifactStore,
                 mirrors: list[str], on_result: Callable[[PlannedStage, StageResult], None],
                 on_failure: Callable[[PlannedStage, BaseException], None],
                 on_submit: Callable[[PlannedStage], Callable | None] = lambda item: None) -> list[StageResult]:
    """Run the planned stages that are not cached; ``on_result`` sees every stage, hits
    included. ``on_submit`` may return a metrics sink the stage can log to as it runs."""
    import ray

    task = ray.remote(execute_stage)
    refs: dict[str, ray.ObjectRef] = {}
    pending: dict[ray.ObjectRef, PlannedStage] = {}
    results = []
    for item in planned:
        if not item.will_run:
            # A hit reports the metrics its artifact was made with, so every run's record is whole.
            manifest = store.read_manifest(item.stage.name, item.key) or {}
            result = StageResult(item.stage.name, item.key, True, manifest.get("metrics", {}),
                                 size_bytes=item.status.size_bytes)
            on_result(item, result)
            results.append(result)
            continue
        upstream_refs = [refs[name] for name in item.stage.upstream if name in refs]
        section = item.stage.config_of(config)
        ref = task.options(name=f"stage:{item.stage.name}", num_cpus=item.stage.task_cpus).remote(
            item.stage, section, item.key, item.upstream_keys, store, mirrors, on_submit(item), *upstream_refs)
        refs[item.stage.name] = ref
        pending[ref] = item
        log.info("%-9s submitted (key %s)", item.stage.name, item.key)
    # After a failure, stages that do not depend on it run to completion: their
    # artifacts are committed, so the next run resumes from them.
    failed: dict[str, BaseException] = {}
    while pending:
        done, _ = ray.wait(list(pending), num_returns=1)
        item = pending.pop(done[0])
        try:
            result = ray.get(done[0])
        except Exception as error:
            # Ray hands a stage its upstream's exception, and may report the downstream
            # stage first: look at the upstream refs, not at the order of reports.
            upstream = _failed_upstream(item.stage, refs)
            cause = (UpstreamFailed(f"not run: upstream stage {upstream!r} failed") if upstream
                     else getattr(error, "cause", None) or error)
            failed[item.stage.name] = cause
            on_failure(item, cause)
            continue
        on_result(item, result)
        results.append(result)
    if failed:
        root_causes = [error for error in failed.values() if not isinstance(error, UpstreamFailed)]
        raise (root_causes or list(failed.values()))[0]
    return results


def _failed_upstream(stage: Stage, refs: dict) -> str | None:
    """The first direct upstream stage of ``stage`` whose task failed in this run."""
    import ray

    for name in stage.upstream:
        ref = refs.get(name)
        if ref is None or not ray.wait([ref], timeout=0)[0]:
            continue
        try:
            ray.get(ref)
        except Exception:
            return name
    return None


class UpstreamFailed(Exception):
    pass
