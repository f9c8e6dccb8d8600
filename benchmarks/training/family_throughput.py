"""Counted training FLOP/s of every family at the sizes, batch sizes and precisions a
comparison might train them at, side by side in one run: which precision and batch size
buy a budget fastest on this machine, measured rather than assumed.

Each row trains one family's frontier size (``wN``, stages/shared/models/widths.py) through
the train stage's engine (stages/train/engine.py ``build_engine``, as the train loop
calls it) on token-budget batches (stages/train/batching.py) of random sentence pairs
whose lengths vary as Multi30k's do with a 1,000-piece vocabulary (15 to 40 pieces, about
as long on both sides). FLOPs are counted as the train stage counts them
(stages/shared/models/flops.py ``training_flops``, pair by pair, padding not counted);
FLOP/s is their sum over the median update's seconds x updates. One thread, as the
default comparison gives each run.

    python benchmarks/training/family_throughput.py                           # w64 w96 w128, 1024 and 4096 tokens, fp32 and bf16
    python benchmarks/training/family_throughput.py --widths 128 --max-tokens 2048 --precisions fp32
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from step_overhead import start_single_process_group, write_rows  # noqa: E402

from pipeline.core.hardware import detect_device, native_precisions  # noqa: E402
from stages.shared.models.build import build_model  # noqa: E402
from stages.shared.models.flops import training_flops  # noqa: E402
from stages.shared.models.loss import translation_loss  # noqa: E402
from stages.train.batching import token_batches  # noqa: E402
from stages.train.config import TrainConfig  # noqa: E402
from stages.train.deepspeed_config import bf16_autocast  # noqa: E402
from stages.train.engine import build_engine, import_deepspeed  # noqa: E402
from stages.train.plan import as_configured  # noqa: E402

FAMILIES = ("transformer", "rnn", "decoder_only", "convs2s")
SETTINGS = {"transformer": {"pre_norm": True}, "rnn": {"cell": "gru", "attention": "additive"},
            "decoder_only": {"ae_loss": False}, "convs2s": {}}
VOCAB, PAD, BOS = 1000, 0, 2


def pair_lengths(count: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    src = rng.integers(15, 41, size=count)
    return src, np.clip(src + rng.integers(-3, 4, size=count), 10, 45)


def timed(family: str, width: int, max_tokens: int, precision: str, updates: int) -> dict:
    torch.manual_seed(0)
    model = build_model(family, f"w{width}", SETTINGS[family], VOCAB, VOCAB, pad_id=PAD)
    training = TrainConfig(max_steps=updates, precision=precision, warmup_steps=10)
    engine = build_engine(model, training, as_configured(training), precision)
    src_lengths, tgt_lengths = pair_lengths(20000)
    batches = token_batches(src_lengths, tgt_lengths, max_tokens, 0, 0)[:updates]
    autocast = bf16_autocast(precision)
    seconds, flops = [], []
    for indices in batches:
        rows, source, target = len(indices), int(src_lengths[indices].max()), int(tgt_lengths[indices].max())
        src = torch.randint(6, VOCAB, (rows, source))
        tgt_out = torch.randint(6, VOCAB, (rows, target))
        tgt_in = torch.cat([torch.full((rows, 1), BOS), tgt_out[:, :-1]], dim=1)
        started = time.perf_counter()
        with torch.autocast("cpu", dtype=torch.bfloat16) if autocast else contextlib.nullcontext():
            loss, _ = translation_loss(engine.module, src, tgt_in, tgt_out, 0, 0.1, PAD)
        engine.backward(loss / tgt_out.numel())
        engine.step()
        seconds.append(time.perf_counter() - started)
        flops.append(sum(training_flops(engine.module, int(s), int(t), False)
                         for s, t in zip(src_lengths[indices], tgt_lengths[indices])))
    half = len(seconds) // 2  # the first updates warm the allocator and oneDNN's caches
    per_update = statistics.median(seconds[half:])
    return {"seconds_per_update": per_update, "flops_per_second": statistics.fmean(flops[half:]) / per_update}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--families", nargs="+", default=list(FAMILIES), choices=FAMILIES)
    parser.add_argument("--widths", nargs="+", type=int, default=[64, 96, 128])
    parser.add_argument("--max-tokens", nargs="+", type=int, default=[1024, 4096])
    parser.add_argument("--precisions", nargs="+", default=None, help="default: fp32 and the CPU's native bf16")
    parser.add_argument("--updates", type=int, default=16)
    parser.add_argument("--json", help="also write the rows to this file")
    args = parser.parse_args()
    torch.set_num_threads(1)
    found = detect_device("cpu")
    precisions = args.precisions or list(dict.fromkeys(["fp32", *native_precisions(found)]))
    import_deepspeed()
    start_single_process_group(False)
    print(f"{found.describe()}, 1 thread, torch {torch.__version__}; {args.updates} updates a row, "
          "the median of the last half")
    print("| family | size | tokens a batch | " + " | ".join(f"{p} GFLOP/s" for p in precisions)
          + (" | bf16 / fp32" if "bf16" in precisions and "fp32" in precisions else "") + " |")
    print("|---|---|---:|" + "---:|" * (len(precisions) + ("bf16" in precisions and "fp32" in precisions)))
    rows = []
    for family in args.families:
        for width in args.widths:
            for max_tokens in args.max_tokens:
                measured = {p: timed(family, width, max_tokens, p, args.updates) for p in precisions}
                rows += [{"family": family, "size": f"w{width}", "max_tokens": max_tokens, "precision": p,
                          "device": found.describe(), **found_row} for p, found_row in measured.items()]
                cells = [f"{measured[p]['flops_per_second'] / 1e9:.1f}" for p in precisions]
                if "bf16" in measured and "fp32" in measured:
                    cells.append(f"{measured['bf16']['flops_per_second'] / measured['fp32']['flops_per_second']:.2f}x")
                print(f"| {family} | w{width} | {max_tokens:,} | " + " | ".join(cells) + " |", flush=True)
    if args.json:
        write_rows(args.json, found.describe(), rows)


if __name__ == "__main__":
    main()
