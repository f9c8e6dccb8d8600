"""``nmt report``: one comparison over the models of several configs or MLflow runs."""

from __future__ import annotations

import logging
from pathlib import Path

from mlflow.exceptions import MlflowException
from mlflow.tracking import MlflowClient

from pipeline import run_settings
from pipeline.commands.console import console
from pipeline.commands.output import fail, load_experiment, open_store, print_report
from pipeline.compare import from_config, from_mlflow, merge
from pipeline.tracking import absolute_tracking_uri, default_tracking_uri
from stages.report import write_report
from stages.report.artifact import read_report

log = logging.getLogger("nmt")


def compare_sources(sources: list[str], output: Path, title: str | None, artifact_root: str | None,
                    tracking_uri: str | None, overrides: list[str] = ()) -> None:
    gathered = []
    for source in sources:
        if source.endswith((".yaml", ".yml")) or Path(source).is_file():
            gathered.append(_from_config(Path(source), artifact_root, list(overrides)))
            continue
        client = MlflowClient(absolute_tracking_uri(tracking_uri or default_tracking_uri()))
        try:
            gathered.append(from_mlflow(client, source))
        except (MlflowException, ValueError) as error:
            fail(f"{source}: not a config file or a usable MLflow run id: {error}", 2)
    for source in gathered:
        for reason in source.skipped:
            log.warning(reason)
    rows, curves, outputs = merge(gathered)
    if not rows:
        fail("no trained models found in " + ", ".join(sources), 1)
    # One config's declared comparisons hold for its own models; across sources the
    # default family (each family's best size against each other's) is declared.
    primary = gathered[0].primary_comparisons if len(gathered) == 1 else []
    written = write_report(rows, curves, output, title or " vs ".join(source.label for source in gathered), outputs,
                           primary_comparisons=primary)
    print_report(read_report(output))
    console.print("wrote " + ", ".join(str(path) for path in written))


def _from_config(config_file: Path, artifact_root: str | None, overrides: list[str]):
    """The trained models of a config with ``overrides``; without any, and where the
    config as written has none trained, those of the last ``nmt run`` of it, with its
    ``--set`` (pipeline/run_settings.py)."""
    experiment = load_experiment(config_file, overrides)
    store = open_store(experiment, artifact_root)
    found = from_config(experiment, store)
    last = [] if overrides or found.rows else run_settings.recorded(store, experiment.name)
    if last:
        console.print(f"{config_file}: the models the last nmt run of it trained, with "
                      + " ".join(f"--set {override}" for override in last), style="dim", highlight=False)
        return from_config(load_experiment(config_file, last), store)
    return found
