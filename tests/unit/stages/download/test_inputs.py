"""The corpus files a config names, checked before anything starts
(stages/download/inputs.py), and ``nmt run`` / ``nmt status`` acting on what it finds."""

from __future__ import annotations

import gzip
import time

import pytest
import yaml
from typer.testing import CliRunner

from pipeline.cli import app
from pipeline.config import load_config
from stages.download.inputs import input_problems


def write_config(directory, train: dict) -> object:
    raw = {"name": "mine", "artifact_root": str(directory / "artifacts"),
           "download": {"src_lang": "en", "tgt_lang": "fr", "train": train,
                        "valid": {"type": "tsv", "file": {"path": "valid.tsv"}},
                        "test": {"type": "tsv", "file": {"path": "valid.tsv"}}}}
    path = directory / "config.yaml"
    path.write_text(yaml.safe_dump(raw))
    return path


def test_missing_files_bad_first_lines_and_good_files_are_told_apart(tmp_path):
    (tmp_path / "valid.tsv").write_text("A dog.\tUn chien.\n")
    with gzip.open(tmp_path / "good.en.gz", "wt") as handle:
        handle.write("A dog.\n")
    (tmp_path / "good.fr").write_text("Un chien.\n")
    (tmp_path / "one_column.tsv").write_text("A dog.\tUn chien.\nno tab here\n")
    (tmp_path / "latin1.fr").write_bytes("Un café.\n".encode("latin-1"))
    good = load_config(write_config(tmp_path, {"type": "files", "src": {"path": "good.en.gz"},
                                               "tgt": {"path": "good.fr"}}))
    assert input_problems(good.download) == []
    missing = load_config(write_config(tmp_path, {"type": "files", "src": {"path": "missing.en"},
                                                  "tgt": {"path": "latin1.fr"}}))
    assert input_problems(missing.download) == [
        f"download.train.src: {tmp_path / 'missing.en'}: input file not found",
        f"download.train.tgt: {tmp_path / 'latin1.fr'}: line 1: invalid UTF-8 (byte 0xe9 at column 7)"]
    columns = load_config(write_config(tmp_path, {"type": "tsv", "file": {"path": "one_column.tsv"}}))
    assert input_problems(columns.download) == [
        f"download.train.file: {tmp_path / 'one_column.tsv'}: line 2: 1 tab-separated columns, need 2"]


def test_nmt_run_refuses_a_missing_corpus_file_before_ray_starts_and_status_names_it(tmp_path, monkeypatch):
    import pipeline.runner

    def no_ray(*args, **kwargs):
        raise AssertionError("Ray was started")

    monkeypatch.setattr(pipeline.runner, "connect_ray", no_ray)
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path / 'mlflow.db'}")
    (tmp_path / "valid.tsv").write_text("A dog.\tUn chien.\n")
    config = write_config(tmp_path, {"type": "tsv", "file": {"path": "train.tsv"}})
    started = time.perf_counter()
    result = CliRunner().invoke(app, ["run", str(config)])
    assert result.exit_code == 2 and f"download.train.file: {tmp_path / 'train.tsv'}: input file not found" in \
        result.output
    assert time.perf_counter() - started < 30
    assert not (tmp_path / "mlflow.db").exists()  # no MLflow run either
    status = CliRunner().invoke(app, ["status", str(config)])
    assert status.exit_code == 0 and "input: download.train.file:" in status.output
