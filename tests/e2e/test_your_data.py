"""docs/your-data.md's complete example, ``docs/examples/your_data.yaml``, run end to end
as a user would: copied beside a ``corpora/`` folder of three small TSV files (made
here from the checked-in Multi30k sample), ``nmt run`` to its report with only the
sizes turned down: at 200 updates its warmup and checkpoints, fractions of the run,
still train the model (a fixed 4,000-update warmup never ended in short runs). It runs
on a terminal, where each stage's progress is one bar redrawn in place. Then the page's
other commands on what it trained: translate, export and report, each given the run's
``--set`` or, without it, finding the settings the run recorded."""

from __future__ import annotations

import gzip
import json
import os
import re
import shutil
import sys

import pytest
from typer.testing import CliRunner

from pipeline.cli import app
from tests.helpers import MULTI30K_SAMPLE, REPO, as_displayed, run_on_a_terminal

pytestmark = pytest.mark.slow
EXAMPLE = REPO / "docs" / "examples" / "your_data.yaml"
SMALL = ["bpe.vocab_size=400", "train.max_steps=200", "train.valid_every=50", "train.max_tokens=512",
         "evaluate.beam_size=2"]


def write_tsv(path, prefix: str, lines: int) -> None:
    with gzip.open(MULTI30K_SAMPLE / f"{prefix}.en.gz", "rt") as src, gzip.open(MULTI30K_SAMPLE / f"{prefix}.de.gz", "rt") as tgt:
        pairs = [f"{s.strip()}\t{t.strip()}" for s, t, _ in zip(src, tgt, range(lines))]
    path.write_text("\n".join(pairs) + "\n", encoding="utf-8")


def test_the_your_data_example_runs_from_tsv_files_to_its_report(tmp_path, monkeypatch):
    config = tmp_path / EXAMPLE.name
    shutil.copy(EXAMPLE, config)
    (tmp_path / "corpora").mkdir()
    for name, prefix, lines in (("train", "train", 600), ("valid", "val", 50), ("test", "test_2016_flickr", 50)):
        write_tsv(tmp_path / "corpora" / f"{name}.tsv", prefix, lines)
    env = {**os.environ, "MLFLOW_TRACKING_URI": f"sqlite:///{tmp_path / 'mlflow.db'}"}
    env.pop("NMT_PROGRESS", None)  # a terminal gets bars by itself
    env["TERM"] = "xterm-256color"
    code, output = run_on_a_terminal([sys.executable, "-m", "pipeline", "run", str(config),
                                      *[arg for item in SMALL for arg in ("--set", item)]], cwd=tmp_path, env=env)
    shown = as_displayed(output)
    assert code == 0, "\n".join(shown[-60:])
    # Each bar is redrawn in place while it runs and replaced by one line when it closes:
    # the training's 200 updates leave one line, in updates a second, and no bar is left.
    trained = [line for line in shown if "train transformer_tiny" in line]
    assert len(trained) == 1 and "200/200 update (100%)" in trained[0] and "update/s, done in" in trained[0], (
        "\n".join(shown))
    assert not [line for line in shown if re.search(r"[━╸╺]+ +[\d,]+/[\d,]+ ", line)], "\n".join(shown)
    (report,) = (tmp_path / "artifacts" / "report").glob("*/report.json")
    rows = json.loads(report.read_text())["models"]
    assert [row["name"] for row in rows] == ["transformer_tiny"]
    assert rows[0]["bleu"] is not None and rows[0]["steps"] == 200
    # It trained: perplexity far below the uniform 400 of the vocabulary, and no warning.
    assert rows[0]["best_valid_ppl"] < 100 and rows[0]["training_warnings"] == [], rows[0]
    (meta,) = (tmp_path / "artifacts" / "download").glob("*/meta.json")
    splits = json.loads(meta.read_text())["splits"]
    assert [splits[name]["pairs"] for name in ("train", "valid", "test")] == [600, 50, 50], splits

    # The other commands find the model this run trained: with the run's --set, or with
    # none, from the settings the run recorded in its artifact root.
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("MLFLOW_TRACKING_URI", env["MLFLOW_TRACKING_URI"])
    small = [arg for item in SMALL for arg in ("--set", item)]
    translated = CliRunner().invoke(app, ["translate", str(config), *small, "--model", "transformer_tiny"],
                                    input="A man is riding a bike.\nTwo dogs play in the snow.\n")
    assert translated.exit_code == 0 and len(translated.stdout.splitlines()) == 2, translated.output
    exported = CliRunner().invoke(app, ["export", str(config), "--model", "transformer_tiny", "--format", "ctranslate2",
                                        "-o", str(tmp_path / "ct2")])
    assert exported.exit_code == 0 and (tmp_path / "ct2" / "model.bin").is_file(), exported.output
    reported = CliRunner().invoke(app, ["report", str(config), *small, "-o", str(tmp_path / "again")])
    assert reported.exit_code == 0, reported.output
    again = json.loads((tmp_path / "again" / "report.json").read_text())["models"]
    assert [(row["name"], row["bleu"]) for row in again] == [(row["name"], row["bleu"]) for row in rows]
