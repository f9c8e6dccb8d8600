"""What the train stage's engine adds to a training step, against a plain PyTorch step
with the same recipe, side by side in one run: time per step, ATen operations per step
(a proxy for kernel launches and Python dispatch: on a GPU about 10 us each), host
syncs per step (``aten::_local_scalar_dense``: a tensor read back by ``.item()``,
``float()``, ``bool()``) and device-wide ``synchronize()`` calls per step.

Rows, each the same Transformer on the same random batch, with label smoothing and
gradient clipping at 1.0:

- ``plain``: the forward under ``torch.autocast`` (bf16) or as it is (fp32), backward,
  ``clip_grad_norm_(foreach=True)``, torch's fused Adam;
- ``train stage``: stages/train/engine.py ``build_engine`` as the train stage builds it,
  called as stages/train/loop.py calls it (``engine.module`` under the loop's autocast,
  the loop's own clipping where ``loop_clips``, ``engine.backward``, ``engine.step``);
- ``DeepSpeed bf16 mode`` (bf16 only): the engine with DeepSpeed's own bf16 section, its
  throughput timer and its clipping, as versions before train VERSION 13 trained bf16
  on a GPU: DeepSpeed wraps the fused Adam in its per-parameter ``FP16_UnfusedOptimizer``.

On a CPU the times are noise-prone at small shapes; the counts are what a GPU runs.

    python benchmarks/training/step_overhead.py                        # CPU: tiny and small, each native precision
    python benchmarks/training/step_overhead.py --device cuda --shapes tiny wu base big --json out.json
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import json
import os
import socket
import statistics
import time
from dataclasses import replace

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from pipeline.core.hardware import detect_device, native_precisions
from stages.shared.models.cross_entropy import label_smoothed_cross_entropy
from stages.shared.models.transformer.config import PRESETS
from stages.shared.models.transformer.model import Transformer
from stages.train.config import TrainConfig
from stages.train.deepspeed_config import bf16_autocast, loop_clips
from stages.train.engine import build_engine, import_deepspeed
from stages.train.plan import as_configured

CLIPPING = 1.0
# name: (config, vocabulary, target tokens a batch on a GPU); Wu et al. (2021)'s
# Transformer-Tiny (configs/multi30k_en_de_wu2021.yaml) at 8,192 tokens a batch.
SHAPES = {"tiny": (PRESETS["tiny"], 8000, 25000), "small": (PRESETS["small"], 8000, 25000),
          "base": (PRESETS["base"], 8000, 25000), "big": (PRESETS["big"], 8000, 25000),
          "wu": (replace(PRESETS["tiny"], d_model=128, heads=4, ff_dim=256, encoder_layers=4, decoder_layers=4,
                         dropout=0.3), 10000, 8192)}


class CountOps(TorchDispatchMode):
    """The ATen operations run inside it, by name (tests/unit/stages/train/test_step_overhead.py
    counts with it too)."""

    def __init__(self):
        super().__init__()
        self.ops = collections.Counter()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.ops[func.overloadpacket.__name__] += 1
        return func(*args, **(kwargs or {}))

    @property
    def total(self) -> int:
        return sum(self.ops.values())

    @property
    def host_syncs(self) -> int:
        return self.ops["_local_scalar_dense"]


class Step:
    """One update of one row; ``kind`` names the optimizer class that steps."""

    def __init__(self, row: str, config, vocab: int, batch, device: str, precision: str):
        torch.manual_seed(0)
        model = Transformer(config, vocab, vocab).to(device)
        self.batch, self.device_type = batch, torch.device(device).type
        self.engine = self.optimizer = None
        self.autocast, self.clip = precision == "bf16", True
        if row == "plain":
            self.model = model
            self.optimizer = torch.optim.Adam(model.parameters(), lr=1e-4, betas=(0.9, 0.98), eps=1e-9, fused=True)
            self.kind = type(self.optimizer).__name__
            return
        overrides = {}
        if row == "DeepSpeed bf16 mode":
            overrides = {"bf16": {"enabled": True}, "timers": {"throughput": {"enabled": True}},
                         "gradient_clipping": CLIPPING}
        training = TrainConfig(max_steps=10**6, use_gpu=device.startswith("cuda"), precision=precision,
                               gradient_clipping=CLIPPING, schedule="constant", lr=1e-4, warmup_steps=0,
                               deepspeed=overrides)
        self.engine = build_engine(model, training, as_configured(training), precision)
        if row == "DeepSpeed bf16 mode":
            self.engine.enable_backward_allreduce = True
            self.autocast = self.clip = False
        else:
            self.autocast, self.clip = bf16_autocast(precision), loop_clips(training, precision)
        self.model, self.kind = self.engine.module, type(self.engine.optimizer).__name__

    def __call__(self) -> None:
        src, tgt_in, tgt_out = self.batch
        with torch.autocast(self.device_type, dtype=torch.bfloat16) if self.autocast else contextlib.nullcontext():
            loss, _ = label_smoothed_cross_entropy(self.model(src, tgt_in), tgt_out)
        if self.engine is None:
            (loss / tgt_out.numel()).backward()
            torch.nn.utils.clip_grad_norm_(self.model.parameters(), CLIPPING, foreach=True)
            self.optimizer.step()
            self.optimizer.zero_grad(set_to_none=True)
            return
        self.engine.backward(loss / tgt_out.numel())
        if self.clip:
            torch.nn.utils.clip_grad_norm_(self.model.parameters(), CLIPPING, foreach=True)
        self.engine.step()


def random_batch(vocab: int, sentences: int, length: int, device: str):
    """(source, target input, target output) of random ids, seeded: every row trains on it."""
    generator = torch.Generator().manual_seed(0)
    tgt_out = torch.randint(6, vocab, (sentences, length), generator=generator).to(device)
    return (torch.randint(6, vocab, (sentences, length), generator=generator).to(device),
            torch.cat([torch.full((sentences, 1), 2, device=device), tgt_out[:, :-1]], dim=1), tgt_out)


def start_single_process_group(gpu: bool) -> None:
    """DeepSpeed's process group of one, on a free loopback port, unless one is up."""
    if torch.distributed.is_initialized():
        return
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    os.environ.update(RANK="0", LOCAL_RANK="0", WORLD_SIZE="1", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    import_deepspeed().init_distributed(dist_backend="nccl" if gpu else "gloo")


def write_rows(path: str, device: str, rows: list[dict]) -> None:
    """The rows as the GPU check reads them (benchmarks/gpu/gpu_summary.py), with the device
    and torch version they were measured on."""
    with open(path, "w") as handle:
        json.dump({"device": device, "torch": torch.__version__, "rows": rows}, handle, indent=2)


def counted_synchronizes():
    """DeepSpeed's accelerator's ``synchronize``, counted: [calls]."""
    from deepspeed.accelerator import get_accelerator

    accelerator, count = get_accelerator(), [0]
    original = accelerator.synchronize

    def counted(*args, **kwargs):
        count[0] += 1
        return original(*args, **kwargs)

    accelerator.synchronize = counted
    return count


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--shapes", nargs="+", default=None, choices=sorted(SHAPES),
                        help="default: tiny small (CPU), tiny wu base big (GPU)")
    parser.add_argument("--precisions", nargs="+", choices=["fp32", "bf16"], default=None,
                        help="default: bf16 on a GPU; on a CPU each precision it runs natively")
    parser.add_argument("--length", type=int, default=24, help="source and target tokens a sentence")
    parser.add_argument("--cpu-sentences", type=int, default=32, help="sentences a batch on a CPU")
    parser.add_argument("--steps", type=int, default=None, help="steps a round; default 3 (CPU), 10 (GPU)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--json", help="also write the rows to this file")
    args = parser.parse_args()
    device, gpu = args.device, args.device.startswith("cuda")
    found = detect_device(device)
    precisions = args.precisions or (["bf16"] if gpu else native_precisions(found))
    shapes = args.shapes or (["tiny", "wu", "base", "big"] if gpu else ["tiny", "small"])
    steps = args.steps or (10 if gpu else 3)
    import_deepspeed()  # quietly, as the train stage imports it, before anything else does
    synchronizes = counted_synchronizes()
    start_single_process_group(gpu)
    print(f"{found.describe()}, {torch.get_num_threads()} thread(s), torch {torch.__version__}; "
          f"median of {args.rounds} interleaved rounds of {steps} steps")
    print("| shape | precision | row | optimizer | ms/step | vs plain | ATen ops/step | host syncs/step | "
          "synchronize()/step |")
    print("|---|---|---|---|---:|---:|---:|---:|---:|")
    rows = []
    for shape in shapes:
        config, vocab, gpu_tokens = SHAPES[shape]
        sentences = max(1, gpu_tokens // args.length) if gpu else args.cpu_sentences
        batch = random_batch(vocab, sentences, args.length, device)
        for precision in precisions:
            names = ["plain", "train stage"] + (["DeepSpeed bf16 mode"] if precision == "bf16" else [])
            built, counts = {}, {}
            for name in names:
                step = Step(name, config, vocab, batch, device, precision)
                for _ in range(3):  # warm-up: allocations, kernel choice, the optimizer's states
                    step()
                synchronizes[0] = 0
                with CountOps() as counter:
                    step()
                counts[name] = (counter.total, counter.host_syncs, synchronizes[0])
                built[name] = step
            times = {name: [] for name in built}
            for round_number in range(args.rounds):  # interleaved: a slow spell slows every row
                order = list(built.items())
                for name, step in order if round_number % 2 == 0 else reversed(order):
                    if gpu:
                        torch.cuda.synchronize()
                    started = time.perf_counter()
                    for _ in range(steps):
                        step()
                    if gpu:
                        torch.cuda.synchronize()
                    times[name].append((time.perf_counter() - started) / steps)
            plain = statistics.median(times["plain"])
            for name, step in built.items():
                seconds = statistics.median(times[name])
                ops, syncs, device_syncs = counts[name]
                row = {"shape": shape, "precision": precision, "row": name, "optimizer": step.kind,
                       "seconds_per_step": seconds, "vs_plain": seconds / plain, "aten_ops": ops,
                       "host_syncs": syncs, "synchronize": device_syncs, "device": found.describe(),
                       "sentences": sentences, "length": args.length}
                rows.append(row)
                print(f"| {shape} | {precision} | {name} | {step.kind} | {1000 * seconds:.1f} | "
                      f"{seconds / plain:.2f}x | {ops:,} | {syncs} | {device_syncs} |", flush=True)
            built.clear()
            if gpu:
                torch.cuda.empty_cache()
    if args.json:
        write_rows(args.json, found.describe(), rows)


if __name__ == "__main__":
    main()
