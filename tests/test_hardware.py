"""Precision resolution per device, CPU capability detection, and the peak FLOP/s that
MFU divides by (datasheet, measured and cached, or the config's override)."""

from __future__ import annotations

import json

import pytest
import torch

from pipeline import peak_flops as peak_module
from pipeline.hardware import CPU_BF16_ENV, Device, HardwareError, cpus_of_this_task, detect_device, \
    resolve_precision
from pipeline.peak_flops import measure_matmul_flops, peak_flops

CUDA_BF16 = Device("cuda", "NVIDIA H100 80GB HBM3", "sm_90", True)
CUDA_NO_BF16 = Device("cuda", "Tesla V100-SXM2-16GB", "sm_70", False, "sm_70 has no bf16 tensor cores")
CPU_AMX = Device("cpu", "Intel(R) Xeon(R) Platinum 8480+", "AVX512, AVX512-BF16, AMX-BF16", True)
CPU_AVX2 = Device("cpu", "AMD EPYC", "AVX2", False, "no AMX or AVX512-BF16")


@pytest.mark.parametrize("device, auto", [(CUDA_BF16, "bf16"), (CUDA_NO_BF16, "fp16"), (CPU_AMX, "bf16"),
                                          (CPU_AVX2, "fp32")])
def test_auto_resolves_to_what_the_device_runs_fast(device, auto):
    assert resolve_precision("auto", device, "train.precision") == auto
    assert resolve_precision("fp32", device, "train.precision") == "fp32"


@pytest.mark.parametrize("device, requested, resolved", [(CUDA_BF16, "bf16", "bf16"), (CUDA_BF16, "fp16", "fp16"),
                                                         (CUDA_NO_BF16, "fp16", "fp16"), (CPU_AMX, "bf16", "bf16")])
def test_an_explicit_precision_the_device_supports_is_kept(device, requested, resolved):
    assert resolve_precision(requested, device, "train.precision") == resolved


def test_bf16_on_a_cpu_without_it_is_refused_naming_the_key_and_the_cpu():
    with pytest.raises(HardwareError) as refused:
        resolve_precision("bf16", CPU_AVX2, "evaluate.precision")
    message = str(refused.value)
    assert message.startswith("evaluate.precision: bf16 is refused")
    assert "AMD EPYC (AVX2)" in message and "no AMX or AVX512-BF16" in message and "fp32 here" in message


def test_bf16_on_a_gpu_without_it_points_to_fp16():
    with pytest.raises(HardwareError, match=r"train\.precision: .*V100.*sm_70.*fp16 with loss scaling"):
        resolve_precision("bf16", CUDA_NO_BF16, "train.precision")


def test_fp16_on_a_cpu_is_refused():
    with pytest.raises(HardwareError, match=r"--precision: fp16 needs a CUDA GPU"):
        resolve_precision("fp16", CPU_AMX, "--precision")


def test_this_cpu_counts_as_bf16_native_only_with_amx_or_avx512_bf16(monkeypatch):
    monkeypatch.delenv(CPU_BF16_ENV, raising=False)
    device = detect_device("cpu")
    has_the_hardware = torch.cpu._is_amx_tile_supported() or torch.cpu._is_avx512_bf16_supported()
    assert device.kind == "cpu" and device.name and device.capability
    assert device.capability.split(", ")[0] == torch.backends.cpu.get_cpu_capability()
    if not has_the_hardware:
        assert not device.bf16 and "no AMX or AVX512-BF16" in device.why
    if device.bf16:  # the probe agreed: autocast runs the LSTM that oneDNN lacks elsewhere
        with torch.autocast("cpu", dtype=torch.bfloat16):
            torch.nn.LSTM(4, 4)(torch.randn(3, 2, 4))


def test_the_environment_can_make_any_cpu_lack_bf16(monkeypatch):
    monkeypatch.setenv(CPU_BF16_ENV, "0")
    device = detect_device("cpu")
    assert not device.bf16 and f"{CPU_BF16_ENV}=0" in device.why
    assert resolve_precision("auto", device, "train.precision") == "fp32"
    with pytest.raises(HardwareError, match=f"train.precision: bf16 is refused.*{CPU_BF16_ENV}=0"):
        resolve_precision("bf16", device, "train.precision")


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


def test_a_ray_task_uses_the_cpus_ray_gave_it(local_ray):
    import ray

    @ray.remote(num_cpus=1)
    def cpus() -> int:
        return cpus_of_this_task()

    assert ray.get(cpus.remote()) == 1
    assert cpus_of_this_task() >= 1  # the driver: every CPU it may run on
