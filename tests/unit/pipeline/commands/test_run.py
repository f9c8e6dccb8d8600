"""``nmt run`` refuses, before anything starts, what this machine cannot run: no
artifact, no MLflow record, no Ray instance."""

from __future__ import annotations

import pytest
import yaml
from typer.testing import CliRunner

from pipeline.cli import app
from tests.helpers import REPO, write_config

SMOKE = REPO / "configs" / "smoke.yaml"


def nmt(*args: str):
    result = CliRunner().invoke(app, list(args))
    if result.exception and not isinstance(result.exception, SystemExit):
        raise result.exception
    return result


@pytest.mark.parametrize("train, message", [
    ({"precision": "bf16"}, "train/transformer_tiny: train.precision: bf16 is refused on this CPU"),
    ({"workers": 2, "cpus_per_worker": 64}, "train.workers (2) x train.cpus_per_worker (64) needs 128 CPUs"),
])
def test_what_this_machine_cannot_run_is_refused_before_anything_starts(tmp_path, monkeypatch, train, message):
    """On a CPU treated as lacking bf16 (as an AVX2-only one does), an explicit bf16 fails
    at once, naming the stage and key, before any artifact or MLflow record is written."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("NMT_CPU_BF16", "0")
    data = yaml.safe_load(SMOKE.read_text())
    data["models"] = [model for model in data["models"] if model["family"] == "transformer"]
    data["train"].update(train)
    config = write_config(tmp_path / "exp.yaml", data)
    result = nmt("run", str(config), "--artifact-root", str(tmp_path / "artifacts"))
    assert result.exit_code == 2
    assert message in " ".join(result.output.split())
    assert not (tmp_path / "artifacts").exists() and not (tmp_path / "mlflow.db").exists()


def test_evaluate_precision_is_checked_too(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("NMT_CPU_BF16", "0")
    data = yaml.safe_load(SMOKE.read_text())
    data["evaluate"] = {"precision": "bf16"}
    result = nmt("run", str(write_config(tmp_path / "exp.yaml", data)), "--artifact-root", str(tmp_path / "a"))
    assert result.exit_code == 2 and "evaluate.precision: bf16 is refused" in " ".join(result.output.split())


@pytest.mark.parametrize("root, message", [
    ("a-file", "is a file, not a directory"),
    ("s3://nmt-artifacts/run?endpoint_override=127.0.0.1:9&scheme=http&access_key=AK&secret_key=SECRET%2Fx",
     "Could not connect"),
    # A raw "@" in a query secret once ended the redaction there ("s3://***@SECRET3:SECRET4").
    ("s3://nmt-artifacts/run?endpoint_override=127.0.0.1:9&scheme=http&access_key=AK"
     "&secret_key=SECRET1/SECRET2@SECRET3:SECRET4", "Could not connect"),
])
def test_an_unusable_artifact_root_is_one_error_line_before_mlflow_or_ray(tmp_path, monkeypatch, root, message):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "a-file").write_text("not a directory")
    result = nmt("run", str(SMOKE), "--artifact-root", root)
    assert result.exit_code == 2
    output = " ".join(result.output.split())
    assert output.startswith("error: artifact root:") and message in output and "Traceback" not in output
    assert "SECRET" not in output
    assert not (tmp_path / "mlflow.db").exists()


def test_status_from_another_directory_reads_the_same_root_and_an_old_one_is_named(tmp_path, monkeypatch):
    """A relative artifact_root is relative to the config file: ``nmt status`` run from
    anywhere looks in one place. Where that place is empty and the same path from the
    working directory (where it used to be read) holds artifacts, the command says so."""
    project = tmp_path / "project"
    project.mkdir()
    config = write_config(project / "exp.yaml", yaml.safe_load(SMOKE.read_text()) | {"artifact_root": "artifacts"})
    elsewhere = tmp_path / "elsewhere"
    (elsewhere / "artifacts" / "download").mkdir(parents=True)  # a run's artifacts under the old rule
    monkeypatch.chdir(elsewhere)
    result = nmt("status", str(config))
    assert result.exit_code == 0, result.output
    said = " ".join(result.output.split())
    assert f"so it is {project / 'artifacts'}" in said and f"{elsewhere / 'artifacts'} (the same path" in said
    # Once the new place exists (moved, or a run made it), nothing more is said.
    (project / "artifacts").mkdir()
    assert "note:" not in nmt("status", str(config)).output
