"""The ``nmt`` command: run a config's stage graph, or show what is cached."""

from __future__ import annotations

import logging
import shlex
import sys
import time
from pathlib import Path
from typing import List, Optional

import typer
import yaml
from rich.console import Console
from rich.logging import RichHandler
from rich.table import Table

from pipeline.artifacts import ArtifactStore
from pipeline.config import ConfigError, ExperimentConfig, load_config
from stages.errors import InputDataError

app = typer.Typer(add_completion=False, no_args_is_help=True,
                  help="Parallel corpus to trained, evaluated translation models, as a cached Ray task graph.")
console = Console(stderr=True)
log = logging.getLogger("nmt")

ConfigArg = typer.Argument(..., help="Experiment YAML file (configs/*.yaml).")
SetOpt = typer.Option([], "--set", help="Override a config key, e.g. --set tokenize.shards=8 (repeatable).")
RootOpt = typer.Option(None, "--artifact-root", envvar="NMT_ARTIFACT_ROOT",
                       help="Artifact store: a path or a pyarrow filesystem URI (s3://, gs://, hdfs://).")


def _table_console() -> Console:
    """Tables go to stdout; piped output gets a wide console instead of rich's 80 columns."""
    return Console() if sys.stdout.isatty() else Console(width=200)


def _fail(message: str, code: int) -> None:
    # Plain text: messages quote file contents and tool output that rich would parse as markup.
    typer.secho(f"error: {message}", fg="red", err=True)
    raise typer.Exit(code)


def _load(config: Path, overrides: list[str]) -> ExperimentConfig:
    try:
        return load_config(config, overrides)
    except ConfigError as error:
        _fail(str(error), 2)


def _store(config: ExperimentConfig, artifact_root: str | None) -> ArtifactStore:
    return ArtifactStore(artifact_root or config.artifact_root)


def _human_bytes(size: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if size < 1024 or unit == "GiB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return str(size)


@app.callback()
def main(verbose: bool = typer.Option(False, "--verbose", "-v", help="Debug logging.")) -> None:
    logging.basicConfig(level=logging.DEBUG if verbose else logging.INFO, format="%(message)s",
                        handlers=[RichHandler(console=console, show_path=False, show_time=False)])


@app.command()
def run(
    config: Path = ConfigArg,
    until: Optional[str] = typer.Option(None, "--until", help="Stop after this stage."),
    force: List[str] = typer.Option([], "--force", help="Recompute this stage and everything downstream."),
    overrides: List[str] = SetOpt,
    artifact_root: Optional[str] = RootOpt,
    address: Optional[str] = typer.Option(None, "--address", envvar="RAY_ADDRESS",
                                          help="Ray cluster to join; default: start a local instance."),
    tracking_uri: Optional[str] = typer.Option(None, "--tracking-uri", envvar="MLFLOW_TRACKING_URI",
                                               help="MLflow tracking URI; default: sqlite:///./mlflow.db"),
) -> None:
    """Run the stage graph, reusing every artifact that is already cached."""
    from pipeline.graph import UpstreamFailed, connect_ray, plan, run_pipeline
    from pipeline.tracking import RunTracker, default_tracking_uri
    from stages.download.locate import mirrors_from

    experiment = _load(config, overrides)
    store = _store(experiment, artifact_root)
    try:
        planned = plan(experiment, store, until, tuple(force))
    except ValueError as error:
        _fail(str(error), 2)
    tracker = RunTracker(tracking_uri or default_tracking_uri(), experiment.name)
    parent = tracker.start(experiment.name, yaml.safe_dump(experiment.model_dump(mode="json"), sort_keys=False),
                           shlex.join(["nmt", *sys.argv[1:]]))
    log.info("MLflow run %s (experiment %r); artifacts in %s", parent, experiment.name, store.root_uri)

    started = time.time()
    rows = []

    open_runs: dict[str, str] = {}  # stage -> its nested MLflow run, opened at submission

    def slice_of(item) -> dict:
        return item.stage.config_of(experiment).model_dump(mode="json")

    def on_submit(item):
        open_runs[item.stage.name] = tracker.open_stage(item.stage.name, item.key, slice_of(item))
        return tracker.live_sink(open_runs[item.stage.name])

    def close(item, result, status: str = "FINISHED", error: str | None = None) -> None:
        if item.stage.name in open_runs:
            tracker.close_stage(open_runs.pop(item.stage.name), item.stage.name, item.key, slice_of(item), result,
                                status, error)
        else:
            tracker.log_stage(item.stage.name, item.key, slice_of(item), result, status, error)

    def on_result(item, result) -> None:
        close(item, result)
        if result.cache_hit:
            log.info("%-9s cache hit (key %s)", item.stage.name, item.key)
            rows.append((item.stage.name, "cached", item.key, _human_bytes(result.size_bytes), "-"))
        else:
            seconds = result.ended - result.started
            log.info("%-9s done in %.1fs (key %s)", item.stage.name, seconds, item.key)
            rows.append((item.stage.name, "ran", item.key, _human_bytes(result.size_bytes), f"{seconds:.1f}s"))

    def on_failure(item, error) -> None:
        from pipeline.graph import StageResult

        failed = StageResult(item.stage.name, item.key, False)  # its task's times are unknown here
        close(item, failed, "FAILED", str(error))
        state = "not run" if isinstance(error, UpstreamFailed) else "failed"
        rows.append((item.stage.name, state, item.key, "-", "-"))

    if any(item.will_run for item in planned):
        connect_ray(address)
    try:
        run_pipeline(experiment, planned, store, mirrors_from(experiment.mirrors), on_result, on_failure, on_submit)
    except (InputDataError, UpstreamFailed) as error:
        tracker.finish("FAILED", {"seconds": time.time() - started})
        _print_rows(rows)
        first_failed = next(row[0] for row in rows if row[1] == "failed")
        _fail(f"stage {first_failed!r} failed: {error}", 1)
    except BaseException:
        for run_id in open_runs.values():  # interrupted while these stages ran
            tracker.abandon_stage(run_id)
        tracker.finish("FAILED", {"seconds": time.time() - started})
        raise
    hits = sum(1 for row in rows if row[1] == "cached")
    tracker.finish("FINISHED", {"seconds": time.time() - started, "cache_hits": hits, "stages_run": len(rows) - hits})
    _print_rows(rows)


def _print_rows(rows: list[tuple]) -> None:
    table = Table("stage", "state", "key", "size", "time", title="nmt run")
    for row in rows:
        table.add_row(*row)
    _table_console().print(table)


@app.command()
def status(config: Path = ConfigArg, overrides: List[str] = SetOpt,
           artifact_root: Optional[str] = RootOpt) -> None:
    """List each stage with its artifact state (cached / missing / invalid), key and size."""
    from pipeline.graph import plan

    experiment = _load(config, overrides)
    store = _store(experiment, artifact_root)
    table = Table("stage", "state", "key", "size", "path", title=f"{experiment.name}: {store.root_uri}")
    for item in plan(experiment, store):
        state = item.status.state.value
        if item.status.reason:
            state += f" ({item.status.reason})"
        size = _human_bytes(item.status.size_bytes) if item.status.size_bytes else "-"
        table.add_row(item.stage.name, state, item.key, size, store.path(item.stage.name, item.key))
    _table_console().print(table)


@app.command()
def inspect(config: Path = ConfigArg, overrides: List[str] = SetOpt, artifact_root: Optional[str] = RootOpt,
            src_len: Optional[float] = typer.Option(None, help="Source tokens per pair (default: the corpus mean)."),
            tgt_len: Optional[float] = typer.Option(None, help="Target tokens per pair (default: the corpus mean).")
            ) -> None:
    """Parameters and FLOPs per target token of every model in a config."""
    import json

    from pipeline.artifacts import ArtifactState
    from pipeline.graph import plan
    from stages.train.flops import cost_summary
    from stages.train.models import build_model

    experiment = _load(config, overrides)
    if not experiment.models:
        _fail(f"{config}: no 'models' section to inspect", 2)
    store = _store(experiment, artifact_root)
    tokenize = next(item for item in plan(experiment, store) if item.stage.name == "tokenize")
    src_vocab = tgt_vocab = experiment.bpe.vocab_size
    tags, source = (4, 5), "bpe.vocab_size from the config; lengths default to 25 (run the data stages for real ones)"
    mean_src = mean_tgt = 25.0
    if tokenize.status.state == ArtifactState.CACHED:
        index = json.loads((store.local_path("tokenize", tokenize.key) / "index.json").read_text())
        train, vocab = index["splits"]["train"], index["vocab"]
        src_vocab, tgt_vocab = vocab["sizes"]["src"], vocab["sizes"]["tgt"]
        mean_src, mean_tgt = train["src_tokens"] / train["pairs"], train["tgt_tokens"] / train["pairs"]
        source = f"vocabulary and mean lengths of tokenize artifact {tokenize.key}"
    src_len, tgt_len = src_len or mean_src, tgt_len or mean_tgt
    table = Table("model", "family", "preset", "params", "embedding", "non-embedding", "fwd FLOPs/tok",
                  "train FLOPs/tok", "6N", title=f"{experiment.name}: {src_len:.1f} source and {tgt_len:.1f} "
                  f"target tokens per pair")
    for spec in experiment.models:
        try:
            model = build_model(spec.family, spec.preset, spec.settings, src_vocab, tgt_vocab, tags)
        except ValueError as error:
            _fail(f"model {spec.name!r}: {error}", 2)
        cost = cost_summary(model, src_len, tgt_len)
        table.add_row(spec.name, spec.family, spec.preset, *(f"{cost[k] / 1e6:,.2f}M" for k in
                      ("total", "embedding", "non_embedding", "forward_flops_per_tgt_token",
                       "train_flops_per_tgt_token", "six_n")))
    _table_console().print(table)
    _table_console().print(f"Sizes from {source}. FLOPs count matrix products (stages/train/flops.py); "
                    "training = 3 x forward; 6N = 6 x non-embedding parameters per token (Kaplan et al. 2020).")
