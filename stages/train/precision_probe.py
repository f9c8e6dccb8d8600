"""``train.precision: auto`` on a CPU with native bf16: the faster of bf16 and fp32 for
this model at its batch shape, measured on this machine.

Native bf16 matrix products do not make a training step faster everywhere: a model
trained 1.26x slower in bf16 than in fp32 on a Zen 4 EPYC, and a step took 2.0x as long
on an AMX Xeon, where the products are small and the casts around them are not. So
``auto`` times a few training steps of a copy of the model on the run's first batch in
each precision (forward under autocast or not, backward, a fused Adam step), and takes
the faster. A machine measures a shape once: the timings are cached per CPU, model and
batch shape (``NMT_CACHE_DIR``), and the run's report says which won and by how much.
A GPU, or a CPU without native bf16, resolves ``auto`` by the table in
pipeline/core/hardware.py without measuring.
"""

from __future__ import annotations

import contextlib
import copy
import hashlib
import json
import statistics
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import torch

from pipeline.core.artifacts import default_cache_dir
from pipeline.core.hardware import Device
from stages.shared.models.loss import translation_loss

WARMUP_STEPS, TIMED_STEPS = 1, 3
CANDIDATES = ("fp32", "bf16")


@dataclass(frozen=True)
class PrecisionChoice:
    precision: str
    seconds_per_step: dict[str, float]  # median timed step per precision
    cached: bool  # read from an earlier run's measurement on this machine

    def reason(self) -> str:
        """``measured: fp32 1.31x faster than bf16 (0.212 s and 0.278 s a step)``."""
        other = next(name for name in self.seconds_per_step if name != self.precision)
        mine, theirs = self.seconds_per_step[self.precision], self.seconds_per_step[other]
        return (f"{'cached' if self.cached else 'measured'}: {self.precision} {theirs / mine:.2f}x as fast as {other} "
                f"({mine:.3g} s and {theirs:.3g} s a step)")


def choose(step_seconds: Callable[[str], float]) -> PrecisionChoice:
    """The precision whose step ``step_seconds(precision)`` times faster (fp32 on a tie:
    the weights' own)."""
    timed = {precision: step_seconds(precision) for precision in CANDIDATES}
    fastest = min(CANDIDATES, key=lambda precision: (timed[precision], CANDIDATES.index(precision)))
    return PrecisionChoice(fastest, timed, cached=False)


def auto_precision(model: torch.nn.Module, batch, pad_id: int, device: Device, label_smoothing: float,
                   cache: Path | None = None) -> PrecisionChoice:
    """The faster precision for training ``model`` on batches like ``batch`` (a
    ``data.Batch``), from this machine's cache or measured now."""
    shape = (tuple(batch.src.shape), tuple(batch.tgt_in.shape))
    key = hashlib.sha256(json.dumps([device.name, device.capability, torch.__version__, torch.get_num_threads(),
                                     repr(getattr(model, "config", type(model).__name__)), shape]).encode()).hexdigest()
    path = (cache or default_cache_dir()) / "precision" / f"{key[:32]}.json"
    try:
        found = json.loads(path.read_text())
        return PrecisionChoice(found["precision"], found["seconds_per_step"], cached=True)
    except (OSError, ValueError, KeyError, TypeError):
        pass
    probe = _StepTimer(model, batch, pad_id, label_smoothing)
    chosen = choose(probe.median_step)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps({"precision": chosen.precision, "seconds_per_step": chosen.seconds_per_step}))
    except OSError:  # a read-only home: measured again next time
        pass
    return chosen


class _StepTimer:
    """Training steps of a copy of the model (its weights untouched) on one batch."""

    def __init__(self, model: torch.nn.Module, batch, pad_id: int, label_smoothing: float):
        self.model, self.batch, self.pad_id, self.label_smoothing = model, batch, pad_id, label_smoothing

    def median_step(self, precision: str) -> float:
        model = copy.deepcopy(self.model).train()
        optimizer = torch.optim.Adam(model.parameters(), lr=1e-6, fused=True)
        autocast = (torch.autocast("cpu", dtype=torch.bfloat16) if precision == "bf16"
                    else contextlib.nullcontext())
        seconds = []
        for step in range(WARMUP_STEPS + TIMED_STEPS):
            started = time.perf_counter()
            with autocast:
                loss, _ = translation_loss(model, self.batch.src, self.batch.tgt_in, self.batch.tgt_out, 0,
                                           self.label_smoothing, self.pad_id)
            loss.backward()
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            if step >= WARMUP_STEPS:
                seconds.append(time.perf_counter() - started)
        return statistics.median(seconds)
