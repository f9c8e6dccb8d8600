"""``nmt run``: plan, check this machine, execute, print (``nmt status`` is status.py)."""

from __future__ import annotations

import logging
import os
import shlex
import signal
import sys
from pathlib import Path

import typer
import yaml
from rich.table import Table

from pipeline import run_settings
from pipeline.cluster_address import ClusterUnreachable
from pipeline.commands.console import console
from pipeline.commands.output import fail, human_bytes, load_experiment, open_store, print_report, table_console
from pipeline.core.artifacts import ArtifactState
from pipeline.core.hardware import HardwareError, cpus_of_this_task
from pipeline.core.object_store import redact
from pipeline.driver_sigterm import Terminated, stop_on_sigterm
from pipeline.graph import preflight
from pipeline.ray_output import stop_progress_bars
from pipeline.run_recorder import ResultRow, RunRecorder
from pipeline.runner import UpstreamFailed, connect_ray, run_pipeline
from pipeline.selection import plan_experiment
from pipeline.tracking import RunTracker, default_tracking_uri
from stages import train
from stages.download import input_problems
from stages.download.config import mirrors_from
from stages.report.artifact import REPORT_JSON, parse_report
from stages.shared.errors import InputDataError

log = logging.getLogger("nmt")


def run_experiment(config: Path, overrides: list[str], until: str | None, force: list[str],
                   artifact_root: str | None, address: str | None, tracking_uri: str | None) -> None:
    experiment = load_experiment(config, overrides)
    store = open_store(experiment, artifact_root, writable=True)  # before Ray and MLflow start
    try:
        planned = plan_experiment(experiment, store, until, tuple(force))
    except ValueError as error:
        fail(str(error), 2)
    if any(item.stage.name == "download" and item.will_run for item in planned):
        problems = input_problems(experiment.download)  # in a second, before Ray and MLflow start
        if problems:
            fail("\n".join(problems), 2)
    if not (address or os.environ.get("RAY_ADDRESS")):
        # A local run: this machine is the one that trains and decodes, so refuse now
        # what it cannot run. A cluster's workers check their own devices.
        try:
            preflight(planned, cpus_of_this_task())
        except HardwareError as error:
            fail(str(error), 2)
    # translate/export/attention/serve CONFIG --model NAME then find what this run trains.
    run_settings.record(store, experiment.name, overrides)
    if any(item.will_run for item in planned):
        try:
            connect_ray(address)  # before the MLflow run opens: a cluster not there leaves no run behind
        except ClusterUnreachable as error:
            fail(str(error), 2)
    tracker = RunTracker(tracking_uri or default_tracking_uri(), experiment.name)
    # The artifact root may carry credentials (in its URI): only its redacted form is tracked.
    parent = tracker.start(experiment.name,
                           redact(yaml.safe_dump(experiment.model_dump(mode="json"), sort_keys=False)),
                           redact(shlex.join(["nmt", *sys.argv[1:]])))
    log.info("MLflow run %s (experiment %r); artifacts in %s", parent, experiment.name, redact(store.root_uri))
    recorder = RunRecorder(tracker, store)

    stop_on_sigterm()
    try:
        try:
            # A select config runs round by round (pipeline/selection.py): each round's
            # plan is known once the one before it has chosen, so plan again after each
            # until nothing is left to run.
            while True:
                run_pipeline(planned, store, mirrors_from(experiment.mirrors), recorder.on_result,
                             recorder.on_failure, recorder.on_submit)
                if experiment.select is None:
                    break
                planned = plan_experiment(experiment, store, until)
                if not any(item.will_run for item in planned):
                    break
                # The stages an earlier round ran or found cached are recorded once.
                recorded = {row.stage for row in recorder.rows}
                planned = [item for item in planned if item.will_run or item.stage.name not in recorded]
        finally:
            stop_progress_bars()  # the workers' bars, where this driver draws them: gone before the tables
    except (InputDataError, UpstreamFailed) as error:
        recorder.finish("FAILED")
        print_results(recorder.rows)
        fail(f"stage {recorder.first_failed()!r} failed: {error}", 1)
    except Terminated:
        recorder.finish("FAILED")  # the stages still running are marked KILLED
        print_results(recorder.rows)
        fail("stopped by SIGTERM: training on this machine checkpointed first; `nmt run` again resumes from the "
             "committed artifacts and checkpoints", 128 + signal.SIGTERM)
    except KeyboardInterrupt:
        recorder.finish("FAILED")  # the stages still running are marked KILLED
        print_results(recorder.rows)
        _say_what_was_kept(planned, store, recorder.rows)
        raise typer.Exit(128 + signal.SIGINT) from None
    except BaseException:
        recorder.finish("FAILED")  # the stages still running are marked KILLED
        raise
    recorder.finish("FINISHED")
    print_results(recorder.rows)
    report = next((item for item in planned if item.stage.name == "report"), None)  # absent with --until
    if report is not None:
        print_report(parse_report(store.read_files("report", report.key, (REPORT_JSON,))[REPORT_JSON]))
        console.print(f"report: {store.path('report', report.key)}/report.md (appendix.md, .html, .csv, .json, plots)")


def _say_what_was_kept(planned, store, rows: list[ResultRow]) -> None:
    """After Ctrl-C: what this run committed, the checkpoint each interrupted training
    keeps, and the command that goes on from there."""
    done = {row.stage for row in rows if row.state in ("ran", "cached")}
    lines = [f"interrupted: {len(done)} of {len(planned)} stages are committed and kept"]
    for item in planned:
        if item.stage.group != "train" or item.stage.name in done or item.status.state == ArtifactState.CACHED:
            continue
        staging = Path(store.root) / item.stage.name / f"{item.key}.partial"
        step = train.kept_checkpoint(item.section, staging) if store.is_local else None
        if step is not None:
            lines.append(f"{item.stage.name}: its checkpoint at update {step:,} is kept")
    lines.append("run the same command to go on from there: " + redact(shlex.join(["nmt", *sys.argv[1:]])))
    for line in lines:
        console.print(line, highlight=False)


def print_results(rows: list[ResultRow]) -> None:
    table = Table("stage", "state", "key", "size", "time", title="nmt run")
    for row in rows:
        table.add_row(row.stage, row.state, row.key, "-" if row.size_bytes is None else human_bytes(row.size_bytes),
                      "-" if row.seconds is None else f"{row.seconds:.1f}s")
    table_console().print(table)
