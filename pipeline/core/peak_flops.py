"""The peak FLOP/s that MFU and the paper's "time x peak" FLOPs estimate divide by.

Three sources, in this order:
- ``train.peak_flops_per_worker`` in the config: an override, reported as "config";
- ``GPU_DATASHEET_PEAKS`` for known GPUs: the vendor's dense (no sparsity) tensor-core
  peak in that precision, reported as "datasheet";
- otherwise a probe: the best rate of dense square matrix products on this device, in
  the resolved precision and thread count, over about two seconds, reported as
  "measured". A probe is cached per host, device, precision and thread count in the
  cache directory (``NMT_CACHE_DIR``), so each machine measures once.

A probe measures what this machine reaches, not what a datasheet promises: MFU against
it says how close a model gets to the hardware it really ran on.
"""

from __future__ import annotations

import json
import os
import re
import socket
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from pipeline.core.hardware import Device

# NVIDIA datasheets, dense (without 2:4 sparsity), per GPU, FLOP/s. First match of
# the name wins, so the more specific names come first. fp32 is the plain fp32 rate:
# torch runs fp32 matrix products without TF32 unless asked to.
GPU_DATASHEET_PEAKS: tuple[tuple[str, str, dict[str, float]], ...] = (
    # (name substring, model as the datasheet calls it, {precision: FLOP/s})
    ("H100 PCIe", "H100 PCIe", {"bf16": 756.5e12, "fp16": 756.5e12, "fp32": 51.2e12}),
    ("H100 NVL", "H100 NVL", {"bf16": 835.5e12, "fp16": 835.5e12, "fp32": 60.0e12}),
    ("H100", "H100 SXM5", {"bf16": 989.4e12, "fp16": 989.4e12, "fp32": 66.9e12}),
    ("H200 NVL", "H200 NVL", {"bf16": 835.5e12, "fp16": 835.5e12, "fp32": 60.0e12}),
    ("H200", "H200 SXM", {"bf16": 989.4e12, "fp16": 989.4e12, "fp32": 66.9e12}),
    ("A100", "A100", {"bf16": 312e12, "fp16": 312e12, "fp32": 19.5e12}),
    ("L40S", "L40S", {"bf16": 362.05e12, "fp16": 362.05e12, "fp32": 91.6e12}),
    ("L4", "L4", {"bf16": 121e12, "fp16": 121e12, "fp32": 30.3e12}),
    ("V100", "V100 SXM2", {"fp16": 125e12, "fp32": 15.7e12}),
    ("T4", "T4", {"fp16": 65e12, "fp32": 8.1e12}),
    ("P100", "P100 SXM2", {"fp16": 21.2e12, "fp32": 10.6e12}),
)

PROBE_SECONDS = 2.0


@dataclass(frozen=True)
class Peak:
    flops: float  # FLOP/s of one worker's device
    source: str  # "config", "datasheet" or "measured"
    detail: str  # what exactly, for the report and MLflow

    def to_json(self) -> dict:
        return asdict(self)


def peak_flops(device: Device, precision: str, threads: int, override: float | None = None,
               cache_dir: Path | None = None) -> Peak:
    """One worker's peak FLOP/s on ``device`` in ``precision`` with ``threads`` CPU threads."""
    if override:
        return Peak(override, "config", f"train.peak_flops_per_worker = {override:.3g}")
    if device.kind == "cuda":
        for pattern, model, peaks in GPU_DATASHEET_PEAKS:
            if pattern in device.name and precision in peaks:
                return Peak(peaks[precision], "datasheet",
                            f"NVIDIA {model} datasheet, dense {precision} ({device.name})")
    return _measured(device, precision, threads, cache_dir)


def _measured(device: Device, precision: str, threads: int, cache_dir: Path | None) -> Peak:
    from pipeline.core.artifacts import default_cache_dir

    host = socket.gethostname()
    threads_text = f"{threads} thread{'s' if threads > 1 else ''}" if device.kind == "cpu" else "GPU"
    where = f"{device.name}, {threads_text}"
    name = "__".join(_slug(part) for part in (host, device.name, precision, f"{threads}t")) + ".json"
    path = (cache_dir or default_cache_dir()) / "peak_flops" / name
    if path.is_file():
        cached = json.loads(path.read_text())
        return Peak(cached["flops"], "measured", f"{precision} matmul probe, {where} (cached {cached['when']})")
    flops = measure_matmul_flops(device.torch_device, precision, threads)
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.is_file():  # another worker probed meanwhile: keep the better measurement
        flops = max(flops, json.loads(path.read_text())["flops"])
    # Written whole, then renamed: two workers probing at once never leave half a file.
    partial = path.with_suffix(f".{os.getpid()}.partial")
    partial.write_text(json.dumps({"flops": flops, "host": host, "device": device.to_json(), "precision": precision,
                                   "threads": threads, "when": time.strftime("%Y-%m-%d %H:%M")}, indent=2))
    os.replace(partial, path)
    return Peak(flops, "measured", f"{precision} matmul probe, {where}")


def measure_matmul_flops(device: str, precision: str, threads: int, seconds: float = PROBE_SECONDS) -> float:
    """The best rate of dense square matrix products, FLOP/s (2 n^3 per product), on
    ``device`` in ``precision``: half the time at each of two sizes, since a small
    product misses a GPU's peak and a large one a CPU's caches. The best single product
    counts, not the mean: a worker probes while its neighbours start up, and short
    products (a few ms on one or two CPU threads) find the moments they leave it alone."""
    import torch

    dtype = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}[precision]
    if device.startswith("cuda"):
        sizes = (4096, 8192)
    else:  # large enough to keep every thread busy, small enough to stay in cache
        sizes = (512, 1024) if threads <= 2 else (1024, 2048)
    previous_threads = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        best = 0.0
        for size in sizes:
            a = torch.randn(size, size, device=device, dtype=dtype)
            b = torch.randn(size, size, device=device, dtype=dtype)
            best = max(best, _best_rate(a, b, seconds / len(sizes)))
        return best
    finally:
        torch.set_num_threads(previous_threads)


def _best_rate(a, b, seconds: float) -> float:
    import torch

    def synchronize() -> None:
        if a.is_cuda:
            torch.cuda.synchronize(a.device)

    flops_per_product = 2 * a.shape[0] ** 3
    a @ b  # warm-up: kernel selection, clocks
    synchronize()
    best, deadline = 0.0, time.perf_counter() + seconds
    # GPU products are timed in groups of 10: one is too short to time against the launch.
    group = 10 if a.is_cuda else 1
    while time.perf_counter() < deadline:
        started = time.perf_counter()
        for _ in range(group):
            a @ b
        synchronize()
        best = max(best, group * flops_per_product / (time.perf_counter() - started))
    return best


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9.]+", "-", text).strip("-") or "x"
