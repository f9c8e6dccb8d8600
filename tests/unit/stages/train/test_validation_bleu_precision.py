"""Validation BLEU decodes in the faster of the run's autocast precision and fp32,
measured on the run's own model at its first BLEU validation
(stages/train/validation_bleu.py)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from stages.shared.inference.search import SearchSettings
from stages.train import validation_bleu
from stages.train.validation_bleu import BleuSample, BleuValidator


class Decoder:
    """A Translator stand-in: every decode advances the validator's clock by
    ``seconds[precision]`` (a clock of its own: a loaded machine cannot reorder them)
    and is counted."""

    seconds: dict[str, float] = {}
    decoded: list[str] = []
    now = 0.0

    def __init__(self, model, src_spm, tgt_spm, special_ids, device, precision):
        self.precision = precision

    def translate_ids(self, sources, search, batch_size):
        type(self).decoded.append(self.precision)
        type(self).now += self.seconds[self.precision]
        return [[type("Hypothesis", (), {"text": "ein Hund"})()] for _ in sources]


class Model:
    def eval(self):
        return self


def validator(precision: str) -> BleuValidator:
    """A validator of one 40-sentence valid sample, built without a tokenized corpus."""
    made = object.__new__(BleuValidator)
    made.src_spm = made.tgt_spm = None
    made.special_ids, made.device, made.run_precision = {}, "cpu", precision
    made.samples = [BleuSample("valid", [[5, 2]] * 40, ["ein Hund"] * 40)]
    made.search, made.batch_size, made.rank, made.world = SearchSettings(beam_size=1), 64, 0, 1
    made.precision = "fp32" if precision == "fp32" else None
    made.probe_seconds = {}
    return made


@pytest.fixture
def decoder(monkeypatch):
    monkeypatch.setattr(validation_bleu, "Translator", Decoder)
    monkeypatch.setattr(validation_bleu, "time", SimpleNamespace(perf_counter=lambda: Decoder.now))
    Decoder.decoded, Decoder.now = [], 0.0
    return Decoder


@pytest.mark.parametrize(("bf16", "chosen"), [(0.03, "fp32"), (0.001, "bf16")])
def test_the_faster_precision_is_chosen_once_and_kept(decoder, bf16, chosen):
    decoder.seconds = {"bf16": bf16, "fp32": 0.01}
    bleu = validator("bf16")
    for _ in range(2):
        scores = bleu(Model())
        assert scores["valid_chrf"] == pytest.approx(100.0)  # the stand-in writes the reference
    assert bleu.precision == chosen and set(bleu.probe_seconds) == {"bf16", "fp32"}
    # The probe: each precision on a few sentences (untimed), then timed; then both validations in the chosen one.
    assert decoder.decoded == ["bf16", "bf16", "fp32", "fp32", chosen, chosen]
    assert bleu.probe_seconds == {"bf16": pytest.approx(bf16), "fp32": pytest.approx(0.01)}


def test_an_fp32_run_decodes_in_fp32_without_a_probe(decoder):
    decoder.seconds = {"fp32": 0.0}
    bleu = validator("fp32")
    bleu(Model())
    assert decoder.decoded == ["fp32"] and bleu.probe_seconds == {}
