"""What the device a stage runs on does fast, and the precision it trains and decodes in.

``precision: auto`` (the default of ``train`` and ``evaluate``) resolves per device:

| device                               | auto | bf16    | fp16    | fp32 |
|--------------------------------------|------|---------|---------|------|
| CUDA GPU with bf16 (sm_80 and newer) | bf16 | bf16    | fp16    | fp32 |
| CUDA GPU without bf16 (V100, T4)     | fp16 | refused | fp16    | fp32 |
| CPU with AMX or AVX512-BF16          | bf16 | bf16    | refused | fp32 |
| CPU without (AVX2, AVX512 alone)     | fp32 | refused | refused | fp32 |

A CPU without native bf16 emulates it: a bf16 matrix product runs many times
slower than fp32 on an AVX2-only AMD EPYC, and oneDNN has no bf16 LSTM there at all
(autocast crashes the RNN). So an explicit bf16 on such a CPU is refused with a
message naming the config key, never silently run. fp16 on a CPU is refused too:
without a GPU's loss scaling it is neither fast nor safe.

A CPU counts as bf16-native when torch's CPU checks report AMX tiles or AVX512-BF16
and a short probe agrees: a bf16 matrix product must run at least a quarter as fast as fp32
(emulated bf16 runs many times slower), and oneDNN must build a bf16
LSTM. ``NMT_CPU_BF16=0`` makes the pipeline treat the CPU as
lacking bf16 (so ``auto`` means fp32): on any machine, that approximates an
AVX2-only CPU, and it is how the test suite runs the path such a CPU takes.
"""

from __future__ import annotations

import functools
import os
import time
from dataclasses import asdict, dataclass
from typing import Callable
from typing import Literal, get_args

# "0" (or "false", "off", "no"): treat this CPU as lacking native bf16.
CPU_BF16_ENV = "NMT_CPU_BF16"
# What train.precision, evaluate.precision and --precision accept: one type, so config
# checks, --help and resolve_precision list the same values.
Precision = Literal["auto", "fp32", "bf16", "fp16"]
PRECISIONS = get_args(Precision)


class HardwareError(ValueError):
    """A setting this machine cannot run (a precision, a GPU, more CPUs than it has);
    the message names the config key."""


@dataclass(frozen=True)
class Device:
    kind: str  # "cpu" or "cuda"
    name: str  # the CPU model or the GPU name
    capability: str  # CPU: vector ISA and bf16 features, e.g. "AVX512, AMX-BF16"; GPU: "sm_90"
    bf16: bool  # runs bf16 matrix products natively
    why: str = ""  # why bf16 is not native, when it is not
    torch_device: str = "cpu"  # what torch calls it: "cpu", "cuda:1"

    def describe(self) -> str:
        return f"{self.name} ({self.capability})"

    def to_json(self) -> dict:
        return asdict(self)


def resolve_precision(requested: str, device: Device, key: str) -> str:
    """The precision to run in: ``auto`` resolved by the table above, an explicit one
    checked against the device. ``key`` names the setting in errors (``train.precision``)."""
    if requested not in PRECISIONS:
        raise HardwareError(f"{key}: unknown precision {requested!r}; use one of {', '.join(PRECISIONS)}")
    if requested == "auto":
        if device.bf16:
            return "bf16"
        return "fp16" if device.kind == "cuda" else "fp32"
    if requested == "bf16" and not device.bf16:
        alternative = "fp16 with loss scaling" if device.kind == "cuda" else "fp32"
        raise HardwareError(
            f"{key}: bf16 is refused on this {device.kind.upper()}, {device.describe()}: {device.why}. "
            f"Use {key}: auto (resolves to {alternative} here) or "
            f"{'fp16' if device.kind == 'cuda' else 'fp32'}.")
    if requested == "fp16" and device.kind != "cuda":
        raise HardwareError(f"{key}: fp16 needs a CUDA GPU (dynamic loss scaling); this is a CPU, "
                             f"{device.describe()}. Use {key}: auto or fp32.")
    return requested


def native_precisions(device: Device) -> list[str]:
    """The precisions worth benchmarking on ``device``: fp32, and bf16 where it is native."""
    return ["fp32", "bf16"] if device.bf16 else ["fp32"]


def detect_device(device: str = "cpu") -> Device:
    """The device that ``device`` ("cpu", "cuda", "cuda:1") names, on this machine."""
    if device.startswith("cuda"):
        return _cuda_device(device)
    return _cpu_device(os.environ.get(CPU_BF16_ENV, "").strip().lower())


@functools.lru_cache(maxsize=None)
def _cpu_device(bf16_setting: str) -> Device:
    import torch

    isa = torch.backends.cpu.get_cpu_capability()  # "AVX2", "AVX512", "DEFAULT", ...
    features = [isa]
    if torch.cpu._is_avx512_bf16_supported():
        features.append("AVX512-BF16")
    if torch.cpu._is_amx_tile_supported():
        features.append("AMX-BF16")
    capability = ", ".join(features)
    name = cpu_model_name()
    if bf16_setting in ("0", "false", "off", "no"):
        return Device("cpu", name, capability, False, f"{CPU_BF16_ENV}={bf16_setting} treats this CPU as lacking bf16")
    if len(features) == 1:
        return Device("cpu", name, capability, False,
                      "no AMX or AVX512-BF16, so bf16 matrix products are emulated (many times slower "
                      "than fp32) and oneDNN has no bf16 LSTM")
    problem = _bf16_probe_problem()
    if problem:
        return Device("cpu", name, capability, False, problem)
    return Device("cpu", name, capability, True)


def _bf16_probe_problem(rate: Callable[[str], float] | None = None) -> str:
    """'' when bf16 really runs natively here; else what the probe saw. About 0.1 s.
    ``rate``: matrix products per second in a dtype ("float32", "bfloat16"); the
    default measures them."""
    import torch

    fp32, bf16 = (rate or _matmul_rate)("float32"), (rate or _matmul_rate)("bfloat16")
    # Emulated bf16 runs many times slower than fp32, native bf16 at
    # least as fast (3.4x on a Zen 4 with AVX512-BF16). A quarter of fp32's rate lies
    # far from both, so that processes probing side by side (a train worker, the
    # evaluate task beside it) reach the same verdict: thresholds at fp32's rate and at
    # half of it each let them disagree.
    if bf16 < fp32 / 4:
        return f"the bf16 probe ran matrix products {fp32 / bf16:.1f}x slower than fp32"
    try:
        with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
            torch.nn.LSTM(8, 8)(torch.randn(2, 1, 8))
    except RuntimeError as error:
        return f"oneDNN could not run a bf16 LSTM ({str(error).splitlines()[0]})"
    return ""


def _matmul_rate(dtype: str) -> float:
    """256 x 256 matrix products per second of CPU time on one thread: the best of
    three 10 ms windows. CPU time, not wall time: on busy cores (a train worker and the
    evaluate task beside it, a test suite) a wall-clock window counts the time the
    scheduler gave the core to another process, and two processes probing at once
    reached opposite verdicts. One thread, so that the product runs on the thread whose
    CPU time is read."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        a, b = (torch.randn(256, 256, dtype=getattr(torch, dtype)) for _ in range(2))
        a @ b  # the first call builds oneDNN's kernel
        best = 0.0
        for _ in range(3):
            started, repeats = time.thread_time(), 0
            while time.thread_time() - started < 0.01:
                a @ b
                repeats += 1
            best = max(best, repeats / (time.thread_time() - started))
        return best
    finally:
        torch.set_num_threads(threads)


def _cuda_device(device: str) -> Device:
    import torch

    if not torch.cuda.is_available():
        raise HardwareError(f"device {device!r}: this machine has no CUDA GPU that torch can use")
    index = torch.device(device).index
    if index is None:  # plain "cuda": the process's current GPU (Ray Train sets each worker's)
        index = torch.cuda.current_device()
    major, minor = torch.cuda.get_device_capability(index)
    # bf16 tensor cores start with Ampere (sm_80); older GPUs only emulate it.
    bf16 = major >= 8
    return Device("cuda", torch.cuda.get_device_name(index), f"sm_{major}{minor}", bf16,
                  "" if bf16 else f"sm_{major}{minor} has no bf16 tensor cores (Ampere, sm_80, is the first)",
                  torch_device=f"cuda:{index}")


def cpu_model_name() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as handle:
            for line in handle:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    import platform

    return platform.processor() or platform.machine() or "unknown CPU"


def cpus_of_this_task() -> int:
    """CPUs this process may use: what Ray assigned to the task or actor it runs in,
    else the CPUs the process is allowed to run on. Threads beyond it oversubscribe."""
    try:
        import ray

        if ray.is_initialized() and ray.get_runtime_context().worker.mode == ray.WORKER_MODE:
            assigned = ray.get_runtime_context().get_assigned_resources().get("CPU")
            if assigned:
                return max(1, int(assigned))
    except ImportError:
        pass
    return len(os.sched_getaffinity(0))
