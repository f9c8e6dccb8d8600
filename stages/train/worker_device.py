"""What a training worker runs on: its device, the precision all workers agree on, and
the peak FLOP/s that MFU divides by.

Each worker resolves ``train.precision`` on its own device (``pipeline/core/hardware.py``),
since on a cluster the driver's machine is not the workers'. Under ``auto`` the
workers of a heterogeneous group could resolve differently, so they take the lowest
precision any of them resolved: one DeepSpeed run has one precision. Each worker
then finds its device's peak (``pipeline/core/peak_flops.py``); their sum is the group's.
"""

from __future__ import annotations

from typing import Callable

import torch
import torch.distributed as dist

from pipeline.core.hardware import Device, detect_device, resolve_precision
from pipeline.core.peak_flops import peak_flops
from stages.train.config import TrainConfig
from stages.train.precision_probe import PrecisionChoice

# Lowest first: the precision a mixed group falls back to.
_ORDER = ("fp32", "fp16", "bf16")


def worker_hardware(train: TrainConfig, device: str, threads: int, world: int,
                    measure: Callable[[Device], PrecisionChoice] | None = None) -> dict:
    """The facts a run reports about its hardware: the group's precision and summed peak,
    this worker's device (rank 0's is the one reported). ``measure`` decides ``auto`` on
    a CPU with native bf16, where bf16 is not always the faster (precision_probe.py)."""
    found = detect_device(device)
    precision, reason = resolve_precision(train.precision, found, "train.precision"), None
    if train.precision == "auto" and found.kind == "cpu" and found.bf16 and measure is not None:
        choice = measure(found)
        precision, reason = choice.precision, choice.reason()
    precision = _agreed(precision, world, found.torch_device)
    peak = peak_flops(found, precision, threads, train.peak_flops_per_worker)
    total_peak = _sum(peak.flops, world, found.torch_device)
    return {"precision": precision, **({"precision_reason": reason} if reason else {}),
            "device": found.kind, "device_name": found.name,
            "device_capability": found.capability, "threads_per_worker": threads,
            "peak_flops_per_worker": total_peak / world, "peak_flops_total": total_peak,
            "peak_source": peak.source, "peak_detail": peak.detail}


# The tensors of a collective live on the worker's device: NCCL (GPU workers) reduces
# CUDA tensors only, gloo (CPU workers) CPU ones.


def _agreed(precision: str, world: int, device: str) -> str:
    if world == 1 or not dist.is_initialized():
        return precision
    rank = torch.tensor([_ORDER.index(precision)], dtype=torch.int64, device=device)
    dist.all_reduce(rank, op=dist.ReduceOp.MIN)
    return _ORDER[int(rank.item())]


def _sum(value: float, world: int, device: str) -> float:
    if world == 1 or not dist.is_initialized():
        return value
    total = torch.tensor([value], dtype=torch.float64, device=device)
    dist.all_reduce(total)
    return float(total.item())
