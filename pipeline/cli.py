"""The ``nmt`` command: run a config's stage graph, or show what is cached."""

from __future__ import annotations

import json
import logging
import os
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
    from pipeline.graph import UpstreamFailed, connect_ray, plan, preflight, run_pipeline
    from pipeline.hardware import HardwareError, cpus_of_this_task
    from pipeline.tracking import RunTracker, default_tracking_uri
    from stages.download.locate import mirrors_from

    experiment = _load(config, overrides)
    store = _store(experiment, artifact_root)
    try:
        planned = plan(experiment, store, until, tuple(force))
    except ValueError as error:
        _fail(str(error), 2)
    if not (address or os.environ.get("RAY_ADDRESS")):
        # A local run: this machine is the one that trains and decodes, so refuse now
        # what it cannot run. A cluster's workers check their own devices.
        try:
            preflight(experiment, planned, cpus_of_this_task())
        except HardwareError as error:
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
            run_id = open_runs.pop(item.stage.name)
            tracker.close_stage(run_id, item.stage.name, item.key, slice_of(item), result, status, error)
        else:
            run_id = tracker.log_stage(item.stage.name, item.key, slice_of(item), result, status, error)
        if status == "FINISHED" and item.stage.mlflow_files:
            tracker.log_files(run_id, store.read_files(item.stage.name, item.key, item.stage.mlflow_files))

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
    report = next((item for item in planned if item.stage.name == "report"), None)
    if report is not None:
        _print_report(json.loads(store.read_files("report", report.key, ("report.json",))["report.json"]))
        console.print(f"report: {store.path('report', report.key)}/report.md (.html, .csv, .json, plots)")


def _print_rows(rows: list[tuple]) -> None:
    table = Table("stage", "state", "key", "size", "time", title="nmt run")
    for row in rows:
        table.add_row(*row)
    _table_console().print(table)


def _print_report(report: dict) -> None:
    from stages.report.tables import SUMMARY_COLUMNS, display_table, hardware_lines, signature_lines

    frame = display_table(report["models"])[list(SUMMARY_COLUMNS)]
    table = Table(*frame.columns, title=report["title"])
    for row in frame.itertuples(index=False):
        table.add_row(*row)
    _table_console().print(table)
    for line in signature_lines(report["models"]):
        _table_console().print(f"sacreBLEU {line}")
    for line in hardware_lines(report["models"]):
        _table_console().print(line)


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
    from pipeline.artifacts import ArtifactState
    from pipeline.graph import find_stage, plan
    from stages.train.flops import cost_summary
    from stages.train.models import build_model

    experiment = _load(config, overrides)
    if not experiment.models:
        _fail(f"{config}: no 'models' section to inspect", 2)
    store = _store(experiment, artifact_root)
    tokenize = find_stage(plan(experiment, store), "tokenize")
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


@app.command()
def report(
    sources: List[str] = typer.Argument(..., help="Experiment YAML files and/or MLflow run ids of 'nmt run'."),
    output: Path = typer.Option(Path("report"), "--output", "-o", help="Directory for the report's files."),
    title: Optional[str] = typer.Option(None, help="Report title; default: the sources' names."),
    artifact_root: Optional[str] = RootOpt,
    tracking_uri: Optional[str] = typer.Option(None, "--tracking-uri", envvar="MLFLOW_TRACKING_URI",
                                               help="MLflow tracking URI for run ids; default: sqlite:///./mlflow.db"),
) -> None:
    """One comparison table and plots over the models of several configs or MLflow runs."""
    from mlflow.exceptions import MlflowException
    from mlflow.tracking import MlflowClient

    from pipeline.compare import from_config, from_mlflow, merge
    from pipeline.tracking import absolute_tracking_uri, default_tracking_uri
    from stages.report import write_report

    gathered = []
    for source in sources:
        if source.endswith((".yaml", ".yml")) or Path(source).is_file():
            experiment = _load(Path(source), [])
            gathered.append(from_config(experiment, _store(experiment, artifact_root)))
            continue
        client = MlflowClient(absolute_tracking_uri(tracking_uri or default_tracking_uri()))
        try:
            gathered.append(from_mlflow(client, source))
        except (MlflowException, ValueError) as error:
            _fail(f"{source}: not a config file or a usable MLflow run id: {error}", 2)
    for source in gathered:
        for reason in source.skipped:
            log.warning(reason)
    rows, curves = merge(gathered)
    if not rows:
        _fail("no trained models found in " + ", ".join(sources), 1)
    written = write_report(rows, curves, output, title or " vs ".join(source.label for source in gathered))
    _print_report(json.loads((output / "report.json").read_text()))
    console.print("wrote " + ", ".join(str(path) for path in written))


@app.command()
def translate(
    model: Path = typer.Argument(..., help="A model file (model.pt, best.pt), a train artifact directory, "
                                           "or an experiment YAML with --model."),
    model_name: Optional[str] = typer.Option(None, "--model", help="Which model of the experiment YAML."),
    input_file: Optional[Path] = typer.Option(None, "--input", "-i", help="Text to translate; default: stdin."),
    beam: int = typer.Option(4, "--beam", min=1, help="Beam size; 1 is greedy."),
    nbest: int = typer.Option(1, "--nbest", min=1, help="Print the N best as 'line ||| text ||| score'."),
    length_penalty: float = typer.Option(0.6, "--length-penalty", min=0.0, help="GNMT alpha."),
    max_length_b: int = typer.Option(50, "--max-length-b", min=1,
                                     help="At most source length + this many output tokens."),
    batch_size: int = typer.Option(32, "--batch-size", min=1, help="Sentences per batch."),
    device: str = typer.Option("cpu", "--device", help="cpu, cuda, cuda:1, ..."),
    precision: str = typer.Option("auto", "--precision",
                                  help="auto (bf16 where the device runs it natively, else fp32; fp16 on older "
                                       "GPUs), fp32, bf16 or fp16 (autocast)."),
    artifact_root: Optional[str] = RootOpt,
) -> None:
    """Translate lines of text with a trained model: one output line per input line."""
    from tqdm import tqdm

    from pipeline.hardware import HardwareError, detect_device, resolve_precision
    from stages.evaluate.translator import SearchSettings, Translator

    if nbest > beam:
        _fail(f"--nbest ({nbest}) cannot exceed --beam ({beam})", 2)
    try:
        resolved = resolve_precision(precision, detect_device(device), "--precision")
        translator = Translator(_model_file(model, model_name, artifact_root), device, resolved)
    except (FileNotFoundError, RuntimeError, HardwareError) as error:
        _fail(str(error), 2)
    text = input_file.read_text(encoding="utf-8") if input_file else sys.stdin.read()
    # Lines end at "\n" only: str.splitlines would also split at U+2028 and friends
    # inside a sentence, and the output would no longer line up with the input.
    lines = [line.removesuffix("\r") for line in text.removesuffix("\n").split("\n")] if text else []
    search = SearchSettings(beam_size=beam, length_penalty=length_penalty, max_length_b=max_length_b, nbest=nbest)
    started = time.time()
    # Chunks of many batches: output streams out while the rest translates, in input order.
    chunk = batch_size * 16
    with tqdm(total=len(lines), unit="sent", desc="translate", disable=None, file=sys.stderr) as bar:
        for start in range(0, len(lines), chunk):
            results = translator.translate(lines[start:start + chunk], search, batch_size, bar.update)
            for index, translations in enumerate(results, start):
                if nbest == 1:
                    print(translations[0].text)
                    continue
                for translation in translations:
                    print(f"{index} ||| {translation.text} ||| {translation.hypothesis.score:.4f}")
            sys.stdout.flush()
    seconds = time.time() - started
    console.print(f"{len(lines)} lines in {seconds:.1f}s ({len(lines) / max(seconds, 1e-9):.1f} sentences/s)")


def _model_file(model: Path, model_name: str | None, artifact_root: str | None) -> Path:
    """The model file that a translate argument names."""
    if model.suffix not in (".yaml", ".yml"):
        return model  # a file or a train artifact directory: Translator takes either
    from pipeline.artifacts import ArtifactState
    from pipeline.graph import find_stage, plan
    from stages.names import train_stage

    experiment = _load(model, [])
    names = [spec.name for spec in experiment.models]
    if model_name not in names:
        _fail(f"{model}: pick a model with --model: {', '.join(names)}", 2)
    store = _store(experiment, artifact_root)
    train = find_stage(plan(experiment, store), train_stage(model_name))
    if train.status.state != ArtifactState.CACHED:
        _fail(f"{model}: {model_name} is not trained yet (nmt run {model} first)", 1)
    return store.local_path(train.stage.name, train.key) / "model.pt"
