"""``train.precision: auto`` on a CPU with native bf16: bf16 where it trains this model
clearly faster than fp32 on this machine, else fp32; decided once per model
configuration and machine, so that every seed of a model trains in one precision.

Native bf16 matrix products do not make a training step faster everywhere: a model
trained 1.26x slower in bf16 than in fp32 on a Zen 4 EPYC, and a step took 2.0x as long
on an AMX Xeon, where the products are small and the casts around them are not. So
``auto`` times a few training steps of a copy of the model in each precision (forward
under autocast or not, backward, a fused Adam step) on one batch that does not depend
on the run's seed (the first of the data's order under ``PROBE_SEED``), and takes bf16
only where it was at least ``BF16_MIN_SPEEDUP`` times as fast: at margins like 1.03x
the timing's own noise decides, and two seeds of one model measured apart could train
in different precisions. A machine decides a configuration once: the choice is cached
per CPU, torch, threads, model configuration and batch shape (``NMT_CACHE_DIR``), and a
lock makes runs that start together wait for the first one's measurement. The run's
report says which precision won and by how much.
A GPU, or a CPU without native bf16, resolves ``auto`` by the table in
pipeline/core/hardware.py without measuring.
"""

from __future__ import annotations

import contextlib
import copy
import fcntl
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
# bf16 is taken where its step is at least this many times as fast as fp32's: below it
# the timing's own noise decides.
BF16_MIN_SPEEDUP = 1.1
# The data order the probe's batch is taken from: one for every seed of a model.
PROBE_SEED = 0


@dataclass(frozen=True)
class PrecisionChoice:
    precision: str
    seconds_per_step: dict[str, float]  # median timed step per precision
    cached: bool  # read from an earlier run's measurement on this machine

    def reason(self) -> str:
        """Why, in the same words for every seed of the model: ``measured: bf16 1.28x
        as fast as fp32 (0.1 s and 0.128 s a step; bf16 needs 1.1x)``."""
        fp32, bf16 = self.seconds_per_step["fp32"], self.seconds_per_step["bf16"]
        speedup = fp32 / bf16
        timed = f"{bf16:.3g} s and {fp32:.3g} s a step; bf16 needs {BF16_MIN_SPEEDUP:g}x"
        if self.precision == "bf16":
            return f"measured: bf16 {speedup:.2f}x as fast as fp32 ({timed})"
        if speedup > 1:
            return f"measured: bf16 only {speedup:.2f}x as fast as fp32 ({timed})"
        return f"measured: fp32 {1 / speedup:.2f}x as fast as bf16 ({timed})"


def choose(step_seconds: Callable[[str], float]) -> PrecisionChoice:
    """bf16 where its step (``step_seconds(precision)``) is at least
    ``BF16_MIN_SPEEDUP`` times as fast as fp32's; else fp32, the weights' own."""
    timed = {precision: step_seconds(precision) for precision in CANDIDATES}
    chosen = "bf16" if timed["fp32"] / timed["bf16"] >= BF16_MIN_SPEEDUP else "fp32"
    return PrecisionChoice(chosen, timed, cached=False)


def auto_precision(model: torch.nn.Module, batch, pad_id: int, device: Device, label_smoothing: float,
                   cache: Path | None = None) -> PrecisionChoice:
    """The precision for training ``model`` on batches like ``batch`` (a ``data.Batch``:
    the probe's, ``PROBE_SEED``'s first), from this machine's cache or measured now."""
    shape = (tuple(batch.src.shape), tuple(batch.tgt_in.shape))
    key = hashlib.sha256(json.dumps([device.name, device.capability, torch.__version__, torch.get_num_threads(),
                                     repr(getattr(model, "config", type(model).__name__)), shape,
                                     BF16_MIN_SPEEDUP]).encode()).hexdigest()
    path = (cache or default_cache_dir()) / "precision" / f"{key[:32]}.json"
    with _measuring(path):
        try:
            found = json.loads(path.read_text())
            return PrecisionChoice(found["precision"], found["seconds_per_step"], cached=True)
        except (OSError, ValueError, KeyError, TypeError):
            pass
        probe = _StepTimer(model, batch, pad_id, label_smoothing)
        chosen = choose(probe.median_step)
        try:
            staged = path.with_suffix(".tmp")
            staged.write_text(json.dumps({"precision": chosen.precision, "seconds_per_step": chosen.seconds_per_step}))
            staged.replace(path)  # whole or not at all: a reader never sees half a file
        except OSError:  # a read-only home: measured again next time
            pass
        return chosen


@contextlib.contextmanager
def _measuring(path: Path):
    """Holds ``path``'s lock while it is read or measured: the seeds of a model that
    start together on one machine wait for the first one's choice instead of each
    measuring (and perhaps choosing) on its own. Without a writable cache, no lock."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        lock = open(path.with_suffix(".lock"), "a")
    except OSError:
        yield
        return
    with lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


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
