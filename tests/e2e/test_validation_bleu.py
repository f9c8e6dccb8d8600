"""BLEU during training, through the real train stage (Ray Train, DeepSpeed): the logged
scores are sacreBLEU's on the lines the model decodes, and best.pt follows them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from sacrebleu.metrics import BLEU, CHRF

from pipeline.core.context import StageContext
from stages import train
from stages.clean import read_split
from stages.shared.inference.search import SearchSettings
from stages.shared.inference.translator import Translator
from stages.shared.models.spec import ModelSpec
from stages.train.config import TrainConfig, TrainStageConfig
from tests.trained_models import write_manifest

pytestmark = pytest.mark.slow
VALID_SENTENCES = 60


@pytest.fixture(scope="module")
def trained(tokenized, tmp_path_factory, local_ray) -> Path:
    """A tiny Transformer trained 90 updates, BLEU scored every 30, best.pt by BLEU, and
    model.pt the last checkpoint's weights (average_last 1)."""
    config = TrainStageConfig(
        model=ModelSpec(name="transformer_tiny", family="transformer", preset="tiny"),
        train=TrainConfig(workers=1, precision="fp32", max_tokens=600, warmup_steps=20, lr_scale=0.3, max_steps=90,
                          valid_every=30, valid_bleu_every=30, valid_bleu_sentences=VALID_SENTENCES,
                          train_bleu_sentences=40, best_metric="valid_bleu", checkpoint_every=30,
                          keep_checkpoints=2, average_last=1, log_every=5, seed=3))
    output = tmp_path_factory.mktemp("bleu") / "out"
    output.mkdir()
    train.run({"tokenize": tokenized}, config, output, StageContext())
    return write_manifest(output)  # as the store commits it: model.pt loads beside its manifest


def rows(output: Path) -> list[dict]:
    return [json.loads(line) for line in (output / "metrics.jsonl").read_text().splitlines()]


def test_bleu_is_logged_every_valid_bleu_every_updates_for_valid_and_training_pairs(trained):
    scored = [row for row in rows(trained) if "valid_bleu" in row]
    assert [row["step"] for row in scored] == [30, 60, 90]
    for row in scored:
        assert {"valid_chrf", "train_bleu", "train_chrf", "bleu_decode_seconds", "train_flops"} <= set(row)
        assert 0 < row["valid_chrf"] < 100 and 0 < row["train_chrf"] < 100


def test_logged_valid_bleu_equals_sacrebleu_on_the_same_decoded_lines(trained, tokenized):
    """The last row was scored with the final weights, which model.pt holds: decoding the
    cleaned valid sources with it and scoring against the cleaned references with
    sacreBLEU gives the logged numbers."""
    last = [row for row in rows(trained) if "valid_bleu" in row][-1]
    valid = read_split(tokenized.parent / "clean", "valid")
    sources = valid.column("src").to_pylist()[:VALID_SENTENCES]
    references = valid.column("tgt").to_pylist()[:VALID_SENTENCES]
    translator = Translator.from_file(trained / "model.pt")
    hypotheses = [line[0].text for line in translator.translate(sources, SearchSettings(beam_size=1))]
    assert BLEU().corpus_score(hypotheses, [references]).score > 0
    assert last["valid_bleu"] == pytest.approx(BLEU().corpus_score(hypotheses, [references]).score, abs=1e-9)
    assert last["valid_chrf"] == pytest.approx(CHRF().corpus_score(hypotheses, [references]).score, abs=1e-9)


def test_best_weights_are_those_of_the_best_valid_bleu(trained):
    scored = [row for row in rows(trained) if "valid_bleu" in row]
    best = max(scored, key=lambda row: row["valid_bleu"])  # the first of equal scores
    report = json.loads((trained / "train_report.json").read_text())
    assert report["metrics"]["best_valid_bleu"] == best["valid_bleu"]
    assert report["metrics"]["best_step"] == best["step"]
    info = torch.load(trained / "best.pt", weights_only=True)["info"]
    assert info["step"] == best["step"] and info["best_metric"] == "valid_bleu"
