"""The peak FLOP/s that MFU divides by: datasheet, measured and cached, or the config's override."""

from __future__ import annotations

import json

import pytest
import torch

from pipeline.core import peak_flops as peak_module
from pipeline.core.hardware import (
    Device,
)
from pipeline.core.peak_flops import measure_matmul_flops, peak_flops

CUDA_BF16 = Device("cuda", "NVIDIA H100 80GB HBM3", "sm_90", True)
CPU_AVX2 = Device("cpu", "AMD EPYC", "AVX2", False, "no AMX or AVX512-BF16")


def test_the_matmul_probe_measures_a_positive_rate_and_restores_the_thread_count():
    before = torch.get_num_threads()
    rate = measure_matmul_flops("cpu", "fp32", threads=before + 1, seconds=0.2)
    assert 1e8 < rate < 1e13  # between a very slow core and far beyond this machine
    assert torch.get_num_threads() == before


def test_a_measured_peak_is_cached_per_precision_and_thread_count(tmp_path, monkeypatch):
    calls = []

    def fake_probe(device, precision, threads, seconds=2.0):
        calls.append((device, precision, threads))
        return 1e10 * threads

    monkeypatch.setattr(peak_module, "measure_matmul_flops", fake_probe)
    first = peak_flops(CPU_AVX2, "fp32", 1, cache_dir=tmp_path)
    assert (first.flops, first.source) == (1e10, "measured") and "1 thread" in first.detail
    again = peak_flops(CPU_AVX2, "fp32", 1, cache_dir=tmp_path)
    assert again.flops == 1e10 and "cached" in again.detail and len(calls) == 1
    assert peak_flops(CPU_AVX2, "fp32", 2, cache_dir=tmp_path).flops == 2e10 and len(calls) == 2
    (cached,) = [path for path in (tmp_path / "peak_flops").iterdir() if "__1t" in path.name]
    assert json.loads(cached.read_text())["device"]["name"] == "AMD EPYC"


def test_concurrent_probes_keep_the_better_measurement(tmp_path, monkeypatch):
    def probe_slowed_while_a_neighbour_finishes(*args, **kwargs):
        # Another worker on this host finishes its probe first, with a better result.
        monkeypatch.setattr(peak_module, "measure_matmul_flops", lambda *args, **kwargs: 5e10)
        peak_flops(CPU_AVX2, "fp32", 1, cache_dir=tmp_path)
        return 1e9

    monkeypatch.setattr(peak_module, "measure_matmul_flops", probe_slowed_while_a_neighbour_finishes)
    assert peak_flops(CPU_AVX2, "fp32", 1, cache_dir=tmp_path).flops == 5e10
    (cached,) = (tmp_path / "peak_flops").iterdir()
    assert json.loads(cached.read_text())["flops"] == 5e10


@pytest.mark.parametrize("name, precision, expected", [
    ("NVIDIA H100 80GB HBM3", "bf16", 989.4e12), ("NVIDIA H100 PCIe", "bf16", 756.5e12),
    ("NVIDIA A100-SXM4-80GB", "bf16", 312e12), ("Tesla V100-SXM2-16GB", "fp16", 125e12),
    ("NVIDIA L40S", "bf16", 362.05e12), ("NVIDIA L4", "bf16", 121e12), ("NVIDIA H100 80GB HBM3", "fp32", 66.9e12)])
def test_known_gpus_take_their_datasheet_peak(name, precision, expected, monkeypatch):
    monkeypatch.setattr(peak_module, "measure_matmul_flops", lambda *args, **kwargs: pytest.fail("probed"))
    peak = peak_flops(Device("cuda", name, "sm_90", True), precision, 1)
    assert (peak.flops, peak.source) == (expected, "datasheet") and "datasheet" in peak.detail


def test_the_configured_peak_overrides_datasheet_and_probe():
    peak = peak_flops(CUDA_BF16, "bf16", 1, override=1.5e14)
    assert (peak.flops, peak.source) == (1.5e14, "config")
    assert "peak_flops_per_worker" in peak.detail
