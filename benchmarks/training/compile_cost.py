"""What ``train.compile`` costs and saves in the train stage's update, family by family,
eager and compiled side by side in one run: the seconds spent compiling, how many graphs
were compiled, the seconds an update takes once compiled, and after how many updates a
run has paid for the compilation.

Each row trains one family's preset through the train stage's engine
(stages/train/engine.py ``build_engine``, called as stages/train/loop.py calls it) on the
same token-budget batches (stages/train/batching.py) of random sentences whose lengths
vary as a corpus's do, so that every update has its own shape, as in a run. Compilation
caches on disk are off (``TORCHINDUCTOR_FX_GRAPH_CACHE=0``,
``TORCHINDUCTOR_AUTOGRAD_CACHE=0``): the first run of a model on a machine. The families
whose config refuses ``train.compile`` (their record's ``compile_refused``) are not
measured by default; ``--families convs2s`` measures why it is refused (the rnn family's
GRU is not traced at all).

    python benchmarks/training/compile_cost.py                                   # CPU: tiny Transformer and decoder-only
    python benchmarks/training/compile_cost.py --device cuda --presets tiny base --max-tokens 8192 --json out.json
"""

from __future__ import annotations

import os

# Before torch reads them: every compilation is a first one.
os.environ.setdefault("TORCHINDUCTOR_FX_GRAPH_CACHE", "0")
os.environ.setdefault("TORCHINDUCTOR_AUTOGRAD_CACHE", "0")

import argparse  # noqa: E402
import contextlib  # noqa: E402
import statistics  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402
import torch  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))

from step_overhead import start_single_process_group, write_rows  # noqa: E402

from pipeline.core.hardware import detect_device, native_precisions  # noqa: E402
from stages.shared.models.build import build_model  # noqa: E402
from stages.shared.models.loss import translation_loss  # noqa: E402
from stages.train.batching import token_batches  # noqa: E402
from stages.train.config import TrainConfig  # noqa: E402
from stages.train.deepspeed_config import bf16_autocast  # noqa: E402
from stages.train import engine as train_engine  # noqa: E402
from stages.train.engine import build_engine, compiled_graphs, import_deepspeed  # noqa: E402
from stages.train.plan import as_configured  # noqa: E402

# ConvS2S refuses train.compile (its record's compile_refused); it is here to measure why.
FAMILIES = ("transformer", "decoder_only", "convs2s")
VOCAB, PAD, BOS = 8000, 0, 2


def corpus_batches(count: int, max_tokens: int, seed: int = 0) -> list[tuple[int, int, int]]:
    """(sentences, source length, target length) of ``count`` token-budget batches over
    random sentence pairs of 4-60 tokens, targets about as long as their sources."""
    rng = np.random.default_rng(seed)
    src = rng.integers(4, 61, size=20000)
    tgt = np.clip(src + rng.integers(-4, 5, size=src.size), 3, 64)
    batches = token_batches(src, tgt, max_tokens, seed, 0)[:count]
    return [(len(b), int(src[b].max()), int(tgt[b].max())) for b in batches]


def random_batch(shape: tuple[int, int, int], device: str):
    sentences, source, target = shape
    generator = torch.Generator().manual_seed(sentences * 1000 + source)
    tgt_out = torch.randint(6, VOCAB, (sentences, target), generator=generator)
    tgt_in = torch.cat([torch.full((sentences, 1), BOS), tgt_out[:, :-1]], dim=1)
    src = torch.randint(6, VOCAB, (sentences, source), generator=generator)
    return src.to(device), tgt_in.to(device), tgt_out.to(device)


def timed_updates(family: str, preset: str, compile_: bool, batches: list, device: str, precision: str) -> dict:
    """Every batch an update; its wall seconds each (the device synchronized)."""
    gpu = device.startswith("cuda")
    torch.manual_seed(0)
    model = build_model(family, preset, {}, VOCAB, VOCAB, pad_id=PAD).to(device)
    training = TrainConfig(max_steps=len(batches), use_gpu=gpu, precision=precision, compile=compile_,
                           warmup_steps=10)
    engine = build_engine(model, training, as_configured(training), precision)
    autocast = bf16_autocast(precision)
    seconds = []
    for shape in batches:
        src, tgt_in, tgt_out = random_batch(shape, device)
        started = time.perf_counter()
        with torch.autocast(device.split(":")[0], dtype=torch.bfloat16) if autocast else contextlib.nullcontext():
            loss, _ = translation_loss(engine.module, src, tgt_in, tgt_out, 0, 0.1, PAD)
        engine.backward(loss / tgt_out.numel())
        engine.step()
        if gpu:
            torch.cuda.synchronize()
        seconds.append(time.perf_counter() - started)
    return {"seconds": seconds, "graphs": compiled_graphs() if compile_ else 0}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--families", nargs="+", default=["transformer", "decoder_only"], choices=FAMILIES)
    parser.add_argument("--presets", nargs="+", default=["tiny"])
    parser.add_argument("--precision", choices=["fp32", "bf16"], default=None,
                        help="default: bf16 on a GPU; on a CPU its first native precision")
    parser.add_argument("--max-tokens", type=int, default=None, help="default 1,500 (CPU), 8,192 (GPU)")
    parser.add_argument("--updates", type=int, default=60, help="updates a row; the median is of the last half")
    parser.add_argument("--backend", default=train_engine.COMPILE_BACKEND,
                        help="torch.compile's backend; 'eager' traces without generating code (a quick check "
                             "that this script runs, as the GPU check's CPU dry run does)")
    parser.add_argument("--json", help="also write the rows to this file")
    args = parser.parse_args()
    train_engine.COMPILE_BACKEND = args.backend
    device, gpu = args.device, args.device.startswith("cuda")
    found = detect_device(device)
    precision = args.precision or ("bf16" if gpu else native_precisions(found)[0])
    max_tokens = args.max_tokens or (8192 if gpu else 1500)
    import_deepspeed()
    start_single_process_group(gpu)
    batches = corpus_batches(args.updates, max_tokens)
    shapes = len(set(batches))
    print(f"{found.describe()}, {torch.get_num_threads()} thread(s), torch {torch.__version__}, {precision}; "
          f"{args.updates} updates of batches up to {max_tokens:,} tokens a side, {shapes} distinct shapes; "
          f"compilation caches off; backend {args.backend}")
    print("| family | preset | eager s/update | compiled s/update | compiled / eager | graphs | "
          "compiling, s | updates to pay it back |")
    print("|---|---|---:|---:|---:|---:|---:|---:|")
    rows = []
    for preset in args.presets:
        for family in args.families:
            eager = timed_updates(family, preset, False, batches, device, precision)
            compiled = timed_updates(family, preset, True, batches, device, precision)
            half = len(batches) // 2
            # Per update, over the same second half of the batches (every shape compiled by then).
            eager_s = statistics.median(eager["seconds"][half:])
            compiled_s = statistics.median(compiled["seconds"][half:])
            # What compiling cost: the compiled run's time beyond its own steady pace, which
            # is where the compilations (first update, any recompilation) went.
            compiling = sum(compiled["seconds"]) - compiled_s * len(batches)
            saving = eager_s - compiled_s
            payback = compiling / saving if saving > 0 else None
            row = {"family": family, "preset": preset, "device": found.describe(), "precision": precision,
                   "max_tokens": max_tokens, "updates": len(batches), "distinct_shapes": shapes,
                   "eager_seconds_per_update": eager_s, "compiled_seconds_per_update": compiled_s,
                   "graphs": compiled["graphs"], "compiling_seconds": compiling, "updates_to_pay_back": payback}
            rows.append(row)
            print(f"| {family} | {preset} | {eager_s:.4f} | {compiled_s:.4f} | {compiled_s / eager_s:.2f}x | "
                  f"{compiled['graphs']} | {compiling:.1f} | "
                  f"{f'{payback:,.0f}' if payback is not None else 'never (slower compiled)'} |", flush=True)
            if gpu:
                torch.cuda.empty_cache()
    if args.json:
        write_rows(args.json, found.describe(), rows)


if __name__ == "__main__":
    main()
