"""precision auto on a CPU with native bf16: the faster precision, measured, wins; and
the run says how it chose."""

from __future__ import annotations

import pytest

from pipeline.core.hardware import Device
from stages.train import worker_device
from stages.train.config import TrainConfig
from stages.train.precision_probe import PrecisionChoice, choose

BF16_CPU = Device(kind="cpu", name="a CPU with bf16", capability="AVX512, AVX512-BF16", bf16=True)


@pytest.mark.parametrize("seconds, expected", [
    ({"fp32": 0.20, "bf16": 0.25}, "fp32"),  # bf16 native but slower here (a Zen 4 took 1.26x as long)
    ({"fp32": 0.30, "bf16": 0.15}, "bf16"),
    ({"fp32": 0.20, "bf16": 0.20}, "fp32"),  # a tie keeps the weights' own precision
])
def test_auto_picks_the_faster_precision_on_a_stand_in_timing(seconds, expected):
    chosen = choose(seconds.__getitem__)
    assert chosen.precision == expected and chosen.seconds_per_step == seconds


def test_the_run_reports_which_precision_auto_chose_and_why(monkeypatch):
    monkeypatch.setattr(worker_device, "detect_device", lambda device: BF16_CPU)
    measured = []

    def measure(device):
        measured.append(device)
        return PrecisionChoice("fp32", {"fp32": 0.2, "bf16": 0.252}, cached=False)

    found = worker_device.worker_hardware(TrainConfig(precision="auto", max_steps=10), "cpu", 1, 1, measure)
    assert measured == [BF16_CPU] and found["precision"] == "fp32"
    assert found["precision_reason"] == "measured: fp32 1.26x as fast as bf16 (0.2 s and 0.252 s a step)"
    # An explicit precision is the user's: nothing is measured, nothing explained.
    explicit = worker_device.worker_hardware(TrainConfig(precision="bf16", max_steps=10), "cpu", 1, 1, measure)
    assert explicit["precision"] == "bf16" and "precision_reason" not in explicit and len(measured) == 1
