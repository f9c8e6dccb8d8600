"""Precision resolution per device and CPU capability detection."""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch

from pipeline.core.hardware import (
    CPU_BF16_ENV,
    Device,
    HardwareError,
    cpus_of_this_task,
    detect_device,
    resolve_precision,
)
from tests.helpers import REPO

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


def test_a_ray_task_uses_the_cpus_ray_gave_it(local_ray):
    import ray

    @ray.remote(num_cpus=1)
    def cpus() -> int:
        return cpus_of_this_task()

    assert ray.get(cpus.remote()) == 1
    assert cpus_of_this_task() >= 1  # the driver: every CPU it may run on


def test_the_bf16_probe_refuses_emulation_but_not_a_busy_core():
    from pipeline.core.hardware import _bf16_probe_problem

    emulated = _bf16_probe_problem(lambda dtype: {"float32": 100.0, "bfloat16": 1.5}[dtype])
    assert emulated == "the bf16 probe ran matrix products 66.7x slower than fp32"
    # A window of the bf16 probe that lost its core to another process: not emulation
    # (what remains is the LSTM check, which this CPU may or may not pass).
    busy = _bf16_probe_problem(lambda dtype: {"float32": 100.0, "bfloat16": 30.0}[dtype])
    assert "probe ran" not in busy


def test_the_bf16_probe_measures_on_one_thread_and_gives_the_threads_back():
    import torch

    from pipeline.core.hardware import _matmul_rate

    seen = []
    before = torch.get_num_threads()
    with pytest.MonkeyPatch.context() as patch:
        real_randn = torch.randn
        patch.setattr(torch, "randn", lambda *a, **k: (seen.append(torch.get_num_threads()), real_randn(*a, **k))[1])
        assert _matmul_rate("float32") > 0
    assert set(seen) == {1} and torch.get_num_threads() == before


PROBE_ON_A_SHARED_CORE = """
import os, subprocess, sys
from pipeline.core.hardware import _matmul_rate
core = min(os.sched_getaffinity(0))
os.sched_setaffinity(0, {core})
alone = _matmul_rate("float32")
hogs = [subprocess.Popen([sys.executable, "-c", f"import os; os.sched_setaffinity(0, {{{core}}})\\nwhile True: pass"])
        for _ in range(3)]
try:
    import time; time.sleep(0.5)  # the hogs are spinning
    shared = _matmul_rate("float32")
finally:
    for hog in hogs:
        hog.kill()
print(alone, shared)
"""


def test_the_bf16_probe_reads_the_same_rate_on_a_core_three_other_processes_share():
    # Two processes that probed side by side once reached opposite verdicts: each
    # window must count only the time its products ran, not the core's time given away.
    done = subprocess.run([sys.executable, "-c", PROBE_ON_A_SHARED_CORE], capture_output=True, text=True,
                          timeout=120, cwd=REPO)
    assert done.returncode == 0, done.stderr
    alone, shared = map(float, done.stdout.split())
    assert shared > 0.5 * alone, (alone, shared)  # a wall clock reads about a quarter
