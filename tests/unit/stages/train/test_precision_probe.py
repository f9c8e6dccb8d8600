"""precision auto on a CPU with native bf16: bf16 where measured clearly faster, once
per model on a machine, the same for every seed; and the run says how it chose."""

from __future__ import annotations

import inspect
import time
from concurrent.futures import ThreadPoolExecutor
from types import SimpleNamespace

import pytest
import torch

from pipeline.core.hardware import Device
from stages.train import bootstrap, precision_probe, worker_device
from stages.train.config import TrainConfig
from stages.train.precision_probe import PrecisionChoice, choose

BF16_CPU = Device(kind="cpu", name="a CPU with bf16", capability="AVX512, AVX512-BF16", bf16=True)


@pytest.mark.parametrize("seconds, expected", [
    ({"fp32": 0.20, "bf16": 0.25}, "fp32"),  # bf16 native but slower here (a Zen 4 took 1.26x as long)
    ({"fp32": 0.30, "bf16": 0.15}, "bf16"),
    ({"fp32": 0.20, "bf16": 0.20}, "fp32"),  # a tie keeps the weights' own precision
    ({"fp32": 0.206, "bf16": 0.20}, "fp32"),  # 1.03x: within the timing's noise
    ({"fp32": 0.221, "bf16": 0.20}, "bf16"),  # 1.1x and more: clearly faster
])
def test_auto_picks_bf16_only_where_it_is_clearly_faster_on_a_stand_in_timing(seconds, expected):
    chosen = choose(seconds.__getitem__)
    assert chosen.precision == expected and chosen.seconds_per_step == seconds


class Tiny(torch.nn.Module):
    """A model as the probe keys it: by its configuration, not its weights."""

    def __init__(self, seed: int):
        super().__init__()
        torch.manual_seed(seed)
        self.config = {"family": "transformer", "width": 8}
        self.linear = torch.nn.Linear(8, 8)


def test_every_seed_of_a_model_gets_the_one_precision_measured_first_even_when_they_start_together(
        monkeypatch, tmp_path):
    """Four seeds of one model start at once on one machine. The stand-in timing says
    bf16 is 1.2x as fast on its first measurement and fp32 on every later one (timings
    that noisy): every seed must train in the first one's choice, measured once."""
    calls = []

    def timing(self, precision):
        calls.append(precision)
        first = len(calls) <= 2
        time.sleep(0.05)  # long enough for the other seeds to reach the lock meanwhile
        return {"fp32": 0.24, "bf16": 0.20}[precision] if first else {"fp32": 0.20, "bf16": 0.24}[precision]

    monkeypatch.setattr(precision_probe._StepTimer, "median_step", timing)
    batch = SimpleNamespace(src=torch.zeros(4, 7), tgt_in=torch.zeros(4, 9))
    with ThreadPoolExecutor(4) as pool:
        chosen = list(pool.map(lambda seed: precision_probe.auto_precision(Tiny(seed), batch, 0, BF16_CPU, 0.1,
                                                                           cache=tmp_path), range(4)))
    assert {choice.precision for choice in chosen} == {"bf16"} and len(calls) == 2
    assert sum(not choice.cached for choice in chosen) == 1
    assert len({choice.reason() for choice in chosen}) == 1  # the report says it once per model


def test_the_probe_s_batch_is_the_same_for_every_seed():
    """The batch the probe times is the first of the data's order under PROBE_SEED, not
    the run's seed: the bootstrap takes it so (stages/train/bootstrap.py)."""
    source = inspect.getsource(bootstrap.train_worker)
    probe = source[source.index("def measure"):source.index("hardware = worker_hardware")]
    assert "PROBE_SEED" in probe and "training.seed" not in probe


def test_the_run_reports_which_precision_auto_chose_and_why(monkeypatch):
    monkeypatch.setattr(worker_device, "detect_device", lambda device: BF16_CPU)
    measured = []

    def measure(device):
        measured.append(device)
        return PrecisionChoice("fp32", {"fp32": 0.2, "bf16": 0.252}, cached=False)

    found = worker_device.worker_hardware(TrainConfig(precision="auto", max_steps=10), "cpu", 1, 1, measure)
    assert measured == [BF16_CPU] and found["precision"] == "fp32"
    assert found["precision_reason"] == ("measured: fp32 1.26x as fast as bf16 (0.252 s and 0.2 s a step; bf16 "
                                         "needs 1.1x)")
    # An explicit precision is the user's: nothing is measured, nothing explained.
    explicit = worker_device.worker_hardware(TrainConfig(precision="bf16", max_steps=10), "cpu", 1, 1, measure)
    assert explicit["precision"] == "bf16" and "precision_reason" not in explicit and len(measured) == 1
