"""What the report reads of a train and an evaluate artifact, as stored: files written
by the stages before their summaries were typed load, and write back byte for byte; a
field renamed on one side is an error naming the artifact and the field, where a dict
read by key gave an empty cell."""

from __future__ import annotations

import json
import shutil

import pytest

from pipeline.core.records import RecordError, to_json
from stages.evaluate.artifact import SCORES_FILE, read_scores
from stages.train.artifact import REPORT_FILE, read_summary
from tests.helpers import REPO

# A train and an evaluate artifact's files of the smoke config, written before the change.
STORED = REPO / "tests" / "data" / "summaries"


def test_summaries_written_before_the_change_load_and_write_back_byte_for_byte():
    summary = read_summary(STORED)
    assert (summary.steps, summary.precision, summary.bleu_probe_seconds.keys()) == (200, "bf16", {"bf16", "fp32"})
    report = json.loads((STORED / REPORT_FILE).read_text())
    assert json.dumps({**report, "metrics": to_json(summary)}, indent=2) == (STORED / REPORT_FILE).read_text()
    scores = read_scores(STORED)
    assert (scores.beam.bleu, scores.greedy.bleu, scores.ctranslate2) == (
        pytest.approx(4.4489, abs=1e-4), pytest.approx(4.7396, abs=1e-4), None)
    assert json.dumps(to_json(scores), indent=2, ensure_ascii=False) == (STORED / SCORES_FILE).read_text()


@pytest.mark.parametrize("file, old, new", [
    (REPORT_FILE, "train_flops", "training_flops"),  # a required field
    (REPORT_FILE, "mfu", "model_flops_utilization"),  # an optional one
    (SCORES_FILE, "greedy_bleu", "greedy_bleu_score"),  # a nested record's
])
def test_a_renamed_field_is_an_error_naming_the_artifact_and_the_field(tmp_path, file, old, new):
    from stages.report.records import from_artifacts

    train_dir, eval_dir = tmp_path / "train" / "key1", tmp_path / "evaluate" / "key2"
    for directory, stored in ((train_dir, REPORT_FILE), (eval_dir, SCORES_FILE)):
        directory.mkdir(parents=True)
        shutil.copy(STORED / stored, directory / stored)
    changed = (train_dir if file == REPORT_FILE else eval_dir) / file
    changed.write_text(changed.read_text().replace(f'"{old}"', f'"{new}"'))
    read = read_summary if file == REPORT_FILE else read_scores
    with pytest.raises(RecordError, match=rf"{changed.parent}.*'({old}|{new})'"):
        read(changed.parent)
    # The report reads the same metrics from the manifests (report.json's rows).
    config = {"train": {"workers": 1}, "model": {"family": "rnn", "preset": "tiny"}}
    for directory, stored in ((train_dir, REPORT_FILE), (eval_dir, SCORES_FILE)):
        written = json.loads((directory / stored).read_text())
        (directory / "MANIFEST.json").write_text(json.dumps(
            {"config": config, "metrics": written.get("metrics", written)}))
    (train_dir / "metrics.jsonl").write_text("")
    with pytest.raises(RecordError, match=rf"{changed.parent}: .*'({old}|{new})'"):
        from_artifacts("rnn_tiny", train_dir, eval_dir)
