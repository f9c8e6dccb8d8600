"""What a resumable checkpoint costs against a weights-only snapshot (``train.resume_every``,
docs/training.md), side by side in one run: seconds to write each and its size on disk,
for Transformers of several sizes, written by the train stage's own functions
(``checkpointer.save`` through the in-process session, ``checkpointer.save_snapshot``)
from the train stage's engine after a few updates, so that Adam's moments exist.

    python benchmarks/training/checkpoint_cost.py                                  # CPU: tiny and base
    python benchmarks/training/checkpoint_cost.py --device cuda --shapes tiny wu base big
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import pyarrow.fs as pafs
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

from step_overhead import SHAPES, Step, random_batch, start_single_process_group  # noqa: E402

from pipeline.core.hardware import detect_device  # noqa: E402
from stages.train import checkpointer  # noqa: E402
from stages.train.progress import TrainingProgress  # noqa: E402
from stages.train.session import InProcessSession  # noqa: E402


def directory_bytes(directory: Path) -> int:
    return sum(path.stat().st_size for path in directory.rglob("*") if path.is_file())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--shapes", nargs="+", default=None, choices=sorted(SHAPES),
                        help="default: tiny base (CPU), tiny wu base big (GPU)")
    parser.add_argument("--rounds", type=int, default=3, help="writes of each kind, interleaved")
    parser.add_argument("--directory", default=None, help="where to write them (default: the temporary directory)")
    parser.add_argument("--json", help="also write the rows to this file")
    args = parser.parse_args()
    device, gpu = args.device, args.device.startswith("cuda")
    shapes = args.shapes or (["tiny", "wu", "base", "big"] if gpu else ["tiny", "base"])
    precision = "bf16" if gpu else "fp32"
    start_single_process_group(gpu)
    print(f"{detect_device(device).describe()}, {precision}; median of {args.rounds} interleaved writes of each, "
          f"to {args.directory or tempfile.gettempdir()}")
    print("| shape | parameters | kind | seconds | MB | seconds vs checkpoint | MB vs checkpoint |")
    print("|---|---:|---|---:|---:|---:|---:|")
    rows, filesystem = [], pafs.LocalFileSystem()
    for shape in shapes:
        config, vocab, _ = SHAPES[shape]
        step = Step("train stage", config, vocab, random_batch(vocab, 8, 16, device), device, precision)
        for _ in range(2):
            step()
        engine, parameters = step.engine, sum(p.numel() for p in step.model.parameters())
        with tempfile.TemporaryDirectory(dir=args.directory, prefix="checkpoint-cost-") as root:
            run_dir = f"{root}/run"
            session = InProcessSession(run_dir, filesystem, keep=1, zero_stage=0)
            progress, seconds, sizes = TrainingProgress(), {"checkpoint": [], "snapshot": []}, {}
            for round_number in range(args.rounds):
                for kind in ("checkpoint", "snapshot") if round_number % 2 == 0 else ("snapshot", "checkpoint"):
                    progress.step += 1
                    if gpu:
                        torch.cuda.synchronize()
                    started = time.perf_counter()
                    if kind == "checkpoint":
                        checkpointer.save(engine, 0, progress, [], None, session)
                    else:
                        checkpointer.save_snapshot(engine, 0, progress, run_dir, filesystem, keep=1)
                    seconds[kind].append(time.perf_counter() - started)
            for saved in checkpointer.complete_checkpoints(run_dir, 1, 0):
                sizes["snapshot" if saved.snapshot else "checkpoint"] = directory_bytes(saved.path)
        for kind in ("checkpoint", "snapshot"):
            median = statistics.median(seconds[kind])
            row = {"shape": shape, "parameters": parameters, "kind": kind, "seconds": median, "bytes": sizes[kind],
                   "device": device, "precision": precision}
            rows.append(row)
            print(f"| {shape} | {parameters:,} | {kind} | {median:.3f} | {sizes[kind] / 1e6:.1f} | "
                  f"{median / statistics.median(seconds['checkpoint']):.2f}x | "
                  f"{sizes[kind] / sizes['checkpoint']:.2f}x |", flush=True)
        del step, engine
        if gpu:
            torch.cuda.empty_cache()
    if args.json:
        Path(args.json).write_text(json.dumps({"rows": rows}, indent=2))


if __name__ == "__main__":
    main()
