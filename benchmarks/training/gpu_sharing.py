"""How many runs of a small model one GPU takes before its total throughput stops
rising: N runs at once, each a Ray task holding 1/N of the GPU (as
``train.gpus_per_worker: 1/N`` asks Ray for), each training the frontier study's
Transformer of one size with the train stage's engine (stages/train/engine.py, fp32
weights under bf16 autocast, as stages/train/loop.py calls it) on random batches for the
same wall time. The table gives each N's tokens a second per run and in total, against
one run alone.

    python benchmarks/training/gpu_sharing.py                          # a GPU: w16, 1 to 16 runs at once
    python benchmarks/training/gpu_sharing.py --device cpu --runs 1 2  # the same code on a CPU's cores
"""

from __future__ import annotations

import argparse
import json
import time

import ray


def train_for(seconds: float, size: str, vocab: int, tokens: int, length: int, device: str, seed: int) -> dict:
    """In a Ray task: one run's target tokens trained in ``seconds`` after a warm-up."""
    import contextlib
    import os
    import socket

    import torch

    from stages.shared.models.cross_entropy import label_smoothed_cross_entropy
    from stages.shared.models.transformer.config import PRESETS
    from stages.shared.models.transformer.model import Transformer
    from stages.train.config import TrainConfig
    from stages.train.deepspeed_config import bf16_autocast
    from stages.train.engine import build_engine, import_deepspeed
    from stages.train.plan import as_configured

    if device == "cpu":
        torch.set_num_threads(1)
    deepspeed = import_deepspeed()
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    os.environ.update(RANK="0", LOCAL_RANK="0", WORLD_SIZE="1", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    gpu = device.startswith("cuda")
    deepspeed.init_distributed(dist_backend="nccl" if gpu else "gloo")
    precision = "bf16" if not gpu or torch.cuda.is_bf16_supported() else "fp32"
    torch.manual_seed(seed)
    model = Transformer(PRESETS[size], vocab, vocab).to(device)
    training = TrainConfig(max_steps=10**9, use_gpu=gpu, precision=precision, schedule="constant", lr=1e-3,
                           warmup_steps=0, gradient_clipping=1.0)
    engine = build_engine(model, training, as_configured(training), precision)
    sentences = max(1, tokens // length)
    generator = torch.Generator().manual_seed(seed)
    src = torch.randint(6, vocab, (sentences, length), generator=generator).to(device)
    tgt_out = torch.randint(6, vocab, (sentences, length), generator=generator).to(device)
    tgt_in = torch.cat([torch.full((sentences, 1), 2, device=device), tgt_out[:, :-1]], dim=1)
    autocast = (torch.autocast(torch.device(device).type, dtype=torch.bfloat16) if bf16_autocast(precision)
                else contextlib.nullcontext())

    def step():
        with autocast:
            loss, _ = label_smoothed_cross_entropy(engine.module(src, tgt_in), tgt_out)
        engine.backward(loss / tgt_out.numel())
        torch.nn.utils.clip_grad_norm_(engine.module.parameters(), 1.0, foreach=True)
        engine.step()

    def synchronize():
        if gpu:
            torch.cuda.synchronize()

    for _ in range(5):  # warm-up: allocations, kernel choice
        step()
    synchronize()
    steps, started = 0, time.perf_counter()
    while time.perf_counter() - started < seconds:
        for _ in range(10):
            step()
        steps += 10
        synchronize()
    elapsed = time.perf_counter() - started
    return {"steps": steps, "seconds": elapsed, "tokens": steps * sentences * length}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default=None, help="cuda (default where there is one) or cpu")
    parser.add_argument("--size", default="w16", help="a frontier preset (docs/models.md)")
    parser.add_argument("--vocab", type=int, default=1000, help="the frontier study's joint vocabulary")
    parser.add_argument("--tokens", type=int, default=1024, help="target tokens a batch (the study's)")
    parser.add_argument("--length", type=int, default=16)
    parser.add_argument("--runs", type=int, nargs="+", default=[1, 2, 4, 8, 16])
    parser.add_argument("--seconds", type=float, default=20.0, help="timed seconds per run")
    parser.add_argument("--json", help="also write the rows to this file")
    args = parser.parse_args()
    # An instance of its own: a bare ray.init() joins whatever instance runs on the machine
    # (in CI once a test's, whose CPUs it then waited for).
    ray.init(address="local", log_to_driver=False)
    device = args.device or ("cuda" if ray.cluster_resources().get("GPU", 0) >= 1 else "cpu")
    print(f"{args.size} Transformer, vocabulary {args.vocab}, {args.tokens} target tokens a batch, "
          f"{args.seconds:g} s a run, on {device}")
    print("| runs at once | share each | tokens/s per run | tokens/s in total | vs one run |")
    print("|---:|---:|---:|---:|---:|")
    rows, alone = [], None
    for runs in args.runs:
        resources = {"num_gpus": 1 / runs, "num_cpus": 1} if device.startswith("cuda") else {"num_cpus": 1}
        task = ray.remote(**resources)(train_for)
        results = ray.get([task.remote(args.seconds, args.size, args.vocab, args.tokens, args.length, device, seed)
                           for seed in range(runs)])
        per_run = [result["tokens"] / result["seconds"] for result in results]
        total = sum(per_run)
        alone = alone or total / runs
        row = {"runs": runs, "share": 1 / runs, "tokens_per_second_per_run": total / runs,
               "tokens_per_second_total": total, "vs_one_run": total / alone, "device": device, "size": args.size}
        rows.append(row)
        print(f"| {runs} | {1 / runs:.3g} | {total / runs:,.0f} | {total:,.0f} | {total / alone:.2f}x |", flush=True)
    if args.json:
        with open(args.json, "w") as handle:
            json.dump(rows, handle, indent=2)


if __name__ == "__main__":
    main()
