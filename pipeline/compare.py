"""Models gathered for ``nmt report`` from configs (their cached artifacts) or from
MLflow runs (the files each stage's run keeps), for one table across experiments, with
each evaluation's outputs, so that the report's intervals and tests run on them too."""

from __future__ import annotations

import dataclasses
import json
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from mlflow.tracking import MlflowClient

from pipeline.config import ExperimentConfig
from pipeline.core.artifacts import ArtifactState, ArtifactStore
from pipeline.graph import find_stage
from pipeline.selection import plan_experiment
from stages.report.artifact import OUTPUT_FILES, RunRecord, evaluation_outputs, model_row
from stages.shared.names import evaluate_stage, train_stage, trained_model
from stages.train.artifact import CURVE_FILE, parse_curve, read_curve


@dataclass
class Gathered:
    label: str  # the experiment (config) or run name the models came from
    rows: list[RunRecord] = field(default_factory=list)
    curves: dict[str, list[dict]] = field(default_factory=dict)
    skipped: list[str] = field(default_factory=list)  # why a model is not in the table
    # Run name -> (hypotheses, references) of its evaluation, where it has them.
    outputs: dict[str, tuple[list[str], list[str]]] = field(default_factory=dict)
    # The config's report.primary_comparisons ([] from MLflow: the default family).
    primary_comparisons: list[list[str]] = field(default_factory=list)


def from_config(config: ExperimentConfig, store: ArtifactStore) -> Gathered:
    """Every model of ``config`` whose train artifact is cached (evaluation if cached)."""
    planned = plan_experiment(config, store)
    gathered = Gathered(config.name, primary_comparisons=config.report.primary_comparisons)
    for model in config.trained_models():
        trained = find_stage(planned, train_stage(model.name))
        evaluation = find_stage(planned, evaluate_stage(model.name))
        if trained.status.state != ArtifactState.CACHED:
            gathered.skipped.append(f"{config.name}/{model.name}: not trained yet (nmt run its config first)")
            continue
        evaluation_manifest = (store.read_manifest(evaluation.stage.name, evaluation.key)
                               if evaluation.status.state == ArtifactState.CACHED else None)
        if evaluation_manifest is None:
            gathered.skipped.append(f"{config.name}/{model.name}: not evaluated; BLEU columns left empty")
        elif (outputs := evaluation_outputs(store.read_files(evaluation.stage.name, evaluation.key,
                                                             OUTPUT_FILES))) is not None:
            gathered.outputs[model.name] = outputs
        # The train artifact's checkpoints are not needed: read only its small files.
        history = store.read_files(trained.stage.name, trained.key, (CURVE_FILE,))[CURVE_FILE]
        record, curve = model_row(model.name, store.read_manifest(trained.stage.name, trained.key),
                                  parse_curve(history.decode("utf-8")), evaluation_manifest, model.run_of,
                                  train_source=store.path(trained.stage.name, trained.key),
                                  eval_source=store.path(evaluation.stage.name, evaluation.key))
        gathered.rows.append(record)
        gathered.curves[model.name] = curve
    return gathered


def from_mlflow(client: MlflowClient, run_id: str) -> Gathered:
    """The models of one ``nmt run`` (its parent run id), from its stages' nested runs."""
    run = client.get_run(run_id)
    if "nmt.stage" in run.data.tags:
        raise ValueError(f"MLflow run {run_id} is the {run.data.tags['nmt.stage']!r} stage of a run; "
                         f"give the parent run ({run.data.tags.get('mlflow.parentRunId')})")
    children = client.search_runs([run.info.experiment_id], f"tags.mlflow.parentRunId = '{run_id}'",
                                   order_by=["attributes.start_time ASC"])
    finished = {child.data.tags["nmt.stage"]: child for child in children
                if child.info.status == "FINISHED" and "nmt.stage" in child.data.tags}
    gathered = Gathered(run.info.run_name or run_id)
    with tempfile.TemporaryDirectory(prefix="nmt-report-") as scratch:
        for stage in finished:
            name = trained_model(stage)
            if name is None:
                continue
            train_dir = Path(client.download_artifacts(finished[stage].info.run_id, "", f"{scratch}/{stage}"))
            if not (train_dir / CURVE_FILE).is_file():
                gathered.skipped.append(f"{gathered.label}/{name}: run has no {CURVE_FILE} (tracked before "
                                        "stages logged their files)")
                continue
            evaluation = finished.get(evaluate_stage(name))
            eval_report = None
            if evaluation is not None:
                eval_dir = client.download_artifacts(evaluation.info.run_id, "stage_report.json",
                                                     f"{scratch}/evaluate-{name}")
                eval_report = json.loads(Path(eval_dir).read_text())
                outputs = _mlflow_outputs(client, evaluation.info.run_id, Path(scratch) / f"outputs-{name}")
                if outputs is not None:
                    gathered.outputs[name] = outputs
            else:
                gathered.skipped.append(f"{gathered.label}/{name}: not evaluated; BLEU columns left empty")
            record, curve = model_row(
                name, json.loads((train_dir / "stage_report.json").read_text()), read_curve(train_dir), eval_report,
                train_source=f"MLflow run {finished[stage].info.run_id}",
                eval_source=f"MLflow run {evaluation.info.run_id}" if evaluation else "")
            gathered.rows.append(record)
            gathered.curves[name] = curve
    if not gathered.rows:
        gathered.skipped.append(f"MLflow run {run_id}: no finished train stage")
    return gathered


def _mlflow_outputs(client: MlflowClient, run_id: str, directory: Path) -> tuple[list[str], list[str]] | None:
    """An evaluate run's logged hypotheses and references; None where it has not both."""
    logged = {entry.path for entry in client.list_artifacts(run_id)}
    if not all(name in logged for name in OUTPUT_FILES):
        return None
    return evaluation_outputs({name: Path(client.download_artifacts(run_id, name, str(directory))).read_bytes()
                               for name in OUTPUT_FILES})


def merge(sources: list[Gathered]) -> tuple[list[RunRecord], dict[str, list[dict]], dict[str, tuple]]:
    """All rows in one table, their curves and their evaluations' outputs; names that
    repeat across sources get their source's label (and a number if that repeats too)."""
    counts: dict[str, int] = {}
    for source in sources:
        for row in source.rows:
            counts[row.name] = counts.get(row.name, 0) + 1
    rows: list[RunRecord] = []
    curves: dict[str, list[dict]] = {}
    outputs: dict[str, tuple] = {}
    for source in sources:
        for row in source.rows:
            name = base = row.name if counts[row.name] == 1 else f"{source.label}/{row.name}"
            copy = 2
            while name in curves:  # the same source given twice
                name, copy = f"{base}#{copy}", copy + 1
            # A renamed run's model is renamed too: runs of two experiments' models that
            # share a name are not seeds of one model.
            model = row.model or row.name
            rows.append(dataclasses.replace(row, name=name,
                                            model=model if name == row.name else f"{source.label}/{model}"))
            curves[name] = source.curves.get(row.name, [])
            if row.name in source.outputs:
                outputs[name] = source.outputs[row.name]
    return rows, curves, outputs

