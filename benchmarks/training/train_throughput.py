"""Training throughput and MFU of our Transformer against Hugging Face's MarianMTModel
of the same shape (random init, no downloads), side by side in one run.

Both models train on the same random batch with the same optimizer (torch's fused
Adam), so the numbers compare the model code, not the data pipeline. The models take
turns: each round times a few steps of each, and the table reports the median round,
so a machine that slows down for a while slows both. FLOPs per step come from
stages/shared/models/flops.py (the count the train stage budgets with; the same for both
models, whose shapes are the same).

MFU divides the achieved FLOP/s by a peak in the same precision: the peak this
machine reaches on large dense matrix products (measured here, by the probe the train
stage uses: pipeline/core/peak_flops.py), and on a GPU also the datasheet's dense peak.

Precisions: on a CPU fp32 and, where the CPU runs it natively (pipeline/core/hardware.py:
AMX or AVX512-BF16), bf16 autocast; on a GPU bf16 autocast. ``--precisions`` forces a
list; bf16 on an AVX2-only CPU is emulated and runs hundreds of times slower.

Two more rows show the pipeline's own paths for our model: ``ours, DeepSpeed`` is the
train stage's engine (stages/train/engine.py ``build_engine``, called as the train loop
calls it: fp32 weights under bf16 autocast, fused Adam), and ``--compile`` adds ``ours,
compiled`` (torch.compile). ``vs ours`` divides the plain step's time by each row's:
the train stage's engine against the same model's plain step.

    python benchmarks/training/train_throughput.py                      # CPU: small and base; GPU: base and big
    python benchmarks/training/train_throughput.py --shapes base --tokens 25000 --device cuda --compile --json out.json
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import socket
import statistics
import time

# As the pipeline's workers do (pipeline/runner.py): huge pages for large CPU tensors.
# torch reads this once, at its first allocation, so it is set before torch loads.
os.environ.setdefault("THP_MEM_ALLOC_ENABLE", "1")

import torch  # noqa: E402

from pipeline.core.hardware import detect_device, native_precisions  # noqa: E402
from pipeline.core.peak_flops import measure_matmul_flops, peak_flops  # noqa: E402
from stages.shared.models.transformer.config import PRESETS as TRANSFORMER_PRESETS  # noqa: E402
from stages.shared.models.transformer.model import Transformer  # noqa: E402
from stages.shared.models.flops import training_flops  # noqa: E402
from stages.shared.models.cross_entropy import label_smoothed_cross_entropy  # noqa: E402
from stages.train.deepspeed_config import bf16_autocast  # noqa: E402

VOCAB = 8000


def marian_like(config) -> torch.nn.Module:
    from transformers import MarianConfig, MarianMTModel

    return MarianMTModel(MarianConfig(
        vocab_size=VOCAB, d_model=config.d_model, encoder_layers=config.encoder_layers,
        decoder_layers=config.decoder_layers, encoder_attention_heads=config.heads,
        decoder_attention_heads=config.heads, encoder_ffn_dim=config.ff_dim, decoder_ffn_dim=config.ff_dim,
        activation_function="relu", dropout=config.dropout, attention_dropout=config.attention_dropout,
        activation_dropout=0.0, max_position_embeddings=512, scale_embedding=True,
        share_encoder_decoder_embeddings=True, pad_token_id=0, eos_token_id=3, decoder_start_token_id=2,
        forced_eos_token_id=3))


def ours_forward(model, src, tgt_in, _tgt_out):
    return model(src, tgt_in)


def marian_forward(model, src, tgt_in, _tgt_out):
    return model(input_ids=src, attention_mask=src != 0, decoder_input_ids=tgt_in).logits


class TorchStep:
    """One training step of a plain module: autocast forward, loss, backward, fused Adam."""

    def __init__(self, model, forward, batch, precision: str, device: str):
        self.model, self.forward, self.batch, self.device = model, forward, batch, device
        self.optimizer = torch.optim.Adam(model.parameters(), lr=1e-4, betas=(0.9, 0.98), eps=1e-9, fused=True)
        self.autocast = (torch.autocast(torch.device(device).type, dtype=torch.bfloat16) if precision == "bf16"
                         else contextlib.nullcontext())
        model.train()

    def __call__(self) -> None:
        with self.autocast:
            logits = self.forward(self.model, *self.batch)
        loss, _ = label_smoothed_cross_entropy(logits, self.batch[2])
        self.optimizer.zero_grad(set_to_none=True)
        (loss / self.batch[2].numel()).backward()
        self.optimizer.step()


class DeepSpeedStep:
    """One training step through the train stage's DeepSpeed engine (one process)."""

    def __init__(self, model, batch, precision: str, device: str):
        from stages.train.config import TrainConfig
        from stages.train.engine import build_engine, import_deepspeed
        from stages.train.plan import as_configured

        deepspeed = import_deepspeed()

        if not torch.distributed.is_initialized():
            with socket.socket() as probe:
                probe.bind(("127.0.0.1", 0))
                port = probe.getsockname()[1]
            os.environ.update({"RANK": "0", "LOCAL_RANK": "0", "WORLD_SIZE": "1", "MASTER_ADDR": "127.0.0.1",
                               "MASTER_PORT": str(port)})
            deepspeed.init_distributed(dist_backend="nccl" if device.startswith("cuda") else "gloo")
        training = TrainConfig(max_steps=10**6, use_gpu=device.startswith("cuda"), precision=precision)
        self.engine, self.batch = build_engine(model, training, as_configured(training), precision), batch
        self.autocast = (torch.autocast(torch.device(device).type, dtype=torch.bfloat16)
                         if bf16_autocast(precision) else contextlib.nullcontext())

    def __call__(self) -> None:
        src, tgt_in, tgt_out = self.batch
        with self.autocast:  # the module itself, as stages/train/loop.py calls it
            loss, _ = label_smoothed_cross_entropy(self.engine.module(src, tgt_in), tgt_out)
        self.engine.backward(loss / tgt_out.numel())
        self.engine.step()


def _sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def time_round(step, steps: int, device: str) -> float:
    _sync(device)
    started = time.perf_counter()
    for _ in range(steps):
        step()
    _sync(device)
    return (time.perf_counter() - started) / steps


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--shapes", nargs="+", default=None, help="default: small base (CPU), base big (GPU)")
    parser.add_argument("--length", type=int, default=24, help="source and target tokens per sentence")
    parser.add_argument("--tokens", type=int, default=None,
                        help="target tokens per batch; default 1,536 on a CPU, 25,000 on a GPU (the paper's batch)")
    parser.add_argument("--steps", type=int, default=None, help="steps per round; default 2 (CPU), 10 (GPU)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--precisions", nargs="+", choices=["fp32", "bf16"], default=None)
    parser.add_argument("--compile", action="store_true", help="add a row for our model under torch.compile")
    parser.add_argument("--no-deepspeed", action="store_true", help="leave out the train stage's engine's row")
    parser.add_argument("--json", help="also write the rows to this file")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    device = args.device
    gpu = device.startswith("cuda")
    shapes = args.shapes or (["base", "big"] if gpu else ["small", "base"])
    tokens = args.tokens or (25_000 if gpu else 1536)
    steps = args.steps or (10 if gpu else 2)
    found = detect_device(device)
    precisions = args.precisions or (["bf16"] if gpu and found.bf16 else native_precisions(found))
    sentences = max(1, tokens // args.length)
    generator = torch.Generator().manual_seed(0)
    src = torch.randint(6, VOCAB, (sentences, args.length), generator=generator).to(device)
    tgt_out = torch.randint(6, VOCAB, (sentences, args.length), generator=generator).to(device)
    tgt_in = torch.cat([torch.full((sentences, 1), 2, device=device), tgt_out[:, :-1]], dim=1)
    batch = (src, tgt_in, tgt_out)
    threads = torch.get_num_threads()
    measured = {p: measure_matmul_flops(device, p, threads) for p in precisions}
    datasheet = {p: peak_flops(found, p, threads) for p in precisions} if gpu else {}
    print(f"{found.describe()}, {threads} thread(s), torch {torch.__version__}; batch {sentences} x {args.length} "
          f"tokens a side; median of {args.rounds} rounds of {steps} steps")
    print("peaks: " + ", ".join(
        f"{p} measured {measured[p] / 1e9:,.0f} GFLOP/s"
        + (f", {datasheet[p].detail} {datasheet[p].flops / 1e9:,.0f} GFLOP/s" if p in datasheet else "")
        for p in precisions))
    if not gpu and not found.bf16 and "bf16" not in precisions:
        print(f"bf16 skipped: {found.why}")
    print()
    mfu_heads = "MFU (measured peak) |" + (" MFU (datasheet) |" if gpu else "")
    print(f"| shape | model | precision | params | s/step | target tokens/s | vs Marian | vs ours | GFLOP/s | "
          f"{mfu_heads}" + (" GPU memory |" if gpu else ""))
    print("|---|---|---|---:|---:|---:|---:|---:|---:|---:|" + ("---:|---:|" if gpu else ""))
    rows = []
    for shape in shapes:
        config = TRANSFORMER_PRESETS[shape]
        flops = training_flops(Transformer(config, VOCAB, VOCAB), args.length, args.length) * sentences
        for precision in precisions:
            candidates = {"ours": lambda: TorchStep(Transformer(config, VOCAB, VOCAB).to(device), ours_forward,
                                                    batch, precision, device),
                          "MarianMTModel": lambda: TorchStep(marian_like(config).to(device), marian_forward,
                                                             batch, precision, device)}
            if args.compile:
                def compiled():
                    model = Transformer(config, VOCAB, VOCAB).to(device)
                    model.compile(dynamic=False)
                    return TorchStep(model, ours_forward, batch, precision, device)
                candidates["ours, compiled"] = compiled
            if not args.no_deepspeed:
                candidates["ours, DeepSpeed"] = lambda: DeepSpeedStep(Transformer(config, VOCAB, VOCAB).to(device),
                                                                      batch, precision, device)
            seconds, memory = _race(candidates, steps, args.rounds, device)
            for name in candidates:
                achieved = flops / seconds[name]
                row = {"shape": shape, "model": name, "precision": precision, "device": found.describe(),
                       "params": _parameters(shape), "seconds_per_step": seconds[name],
                       "tokens_per_second": sentences * args.length / seconds[name], "flops_per_second": achieved,
                       "mfu_measured": achieved / measured[precision],
                       "mfu_datasheet": achieved / datasheet[precision].flops if gpu else None,
                       "vs_marian": seconds["MarianMTModel"] / seconds[name],
                       "vs_ours": seconds["ours"] / seconds[name], "gpu_memory": memory.get(name)}
                rows.append(row)
                print(f"| {shape} | {name} | {precision} | {row['params'] / 1e6:.1f}M | {seconds[name]:.3f} | "
                      f"{row['tokens_per_second']:,.0f} | {row['vs_marian']:.2f}x | {row['vs_ours']:.2f}x | "
                      f"{achieved / 1e9:,.0f} | "
                      f"{row['mfu_measured']:.1%} |"
                      + (f" {row['mfu_datasheet']:.1%} | {memory[name] / 2**30:.1f} GiB |" if gpu else ""),
                      flush=True)
    if not gpu:  # a noisy machine may have probed low at the start: say what it reached after
        again = {p: measure_matmul_flops(device, p, threads) for p in precisions}
        best = {p: max(measured[p], again[p]) for p in precisions}
        print("\nmatmul peak measured again after the table: "
              + ", ".join(f"{p} {again[p] / 1e9:,.0f} GFLOP/s" for p in precisions) + "; MFU against the higher: "
              + ", ".join(f"{row['shape']} {row['model']} {row['flops_per_second'] / best[row['precision']]:.1%}"
                          for row in rows))
    if args.json:
        with open(args.json, "w") as handle:
            json.dump({"device": found.describe(), "torch": torch.__version__, "tokens": sentences * args.length,
                       "rows": rows}, handle, indent=2)


def _race(candidates: dict, steps: int, rounds: int, device: str) -> tuple[dict, dict]:
    """Median seconds per step of each candidate, timed in turns; and peak GPU memory."""
    built, memory = {}, {}
    for name, build in candidates.items():
        torch.manual_seed(0)
        if device.startswith("cuda"):
            torch.cuda.reset_peak_memory_stats()
        built[name] = build()
        built[name]()  # warm-up: allocations, kernel selection, compilation
        built[name]()
        if device.startswith("cuda"):
            memory[name] = torch.cuda.max_memory_allocated()
    times = {name: [] for name in candidates}
    for round_number in range(rounds):
        # Each round reverses the order of the last, so none always runs right after
        # the same other one (whose freed memory it then reuses).
        order = list(built.items())
        for name, step in order if round_number % 2 == 0 else reversed(order):
            times[name].append(time_round(step, steps, device))
    return {name: statistics.median(values) for name, values in times.items()}, memory


def _parameters(shape: str) -> int:
    model = Transformer(TRANSFORMER_PRESETS[shape], VOCAB, VOCAB)
    return sum(p.numel() for p in {id(p): p for p in model.parameters()}.values())


if __name__ == "__main__":
    main()
