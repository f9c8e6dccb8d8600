"""Training throughput and MFU of our Transformer against Hugging Face's MarianMTModel
of the same shape (random init, no downloads), fp32 and bf16 autocast.

Both models train on the same random batch with the same optimizer (Adam), so the
numbers compare the model code, not the data pipeline. FLOPs per step come from
stages/train/flops.py (the same count the train stage budgets with; identical for
both models since the shapes are). MFU divides achieved FLOP/s by the peak this
machine reaches on dense matrix products in the same precision and thread count,
measured here by the probe the train stage uses (pipeline/peak_flops.py).

Precisions: by default fp32 and, where the device runs it natively (pipeline/hardware.py:
AMX or AVX512-BF16 on a CPU, sm_80+ on a GPU), bf16 autocast. ``--precisions fp32 bf16``
forces both; bf16 on an AVX2-only CPU is emulated and runs hundreds of times slower.

    pip install -e '.[bench]'          # transformers, for the peer model
    python benchmarks/train_throughput.py [--shapes small base] [--steps 5] [--device cpu|cuda] [--threads N]
"""

from __future__ import annotations

import argparse
import contextlib
import time

import torch

from pipeline.hardware import detect_device, native_precisions
from pipeline.peak_flops import measure_matmul_flops
from stages.train.flops import training_flops
from stages.train.loss import label_smoothed_cross_entropy
from stages.train.models.presets import TRANSFORMER_PRESETS
from stages.train.models.transformer import Transformer

VOCAB = 8000


def marian_like(config) -> torch.nn.Module:
    from transformers import MarianConfig, MarianMTModel

    return MarianMTModel(MarianConfig(
        vocab_size=VOCAB, d_model=config.d_model, encoder_layers=config.encoder_layers,
        decoder_layers=config.decoder_layers, encoder_attention_heads=config.heads,
        decoder_attention_heads=config.heads, encoder_ffn_dim=config.ff_dim, decoder_ffn_dim=config.ff_dim,
        activation_function="relu", dropout=config.dropout, attention_dropout=0.0, activation_dropout=0.0,
        max_position_embeddings=512, scale_embedding=True, share_encoder_decoder_embeddings=True,
        pad_token_id=0, eos_token_id=3, decoder_start_token_id=2, forced_eos_token_id=3))


def time_steps(model, forward, batch, steps: int, bf16: bool, device: str) -> float:
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-4, betas=(0.9, 0.98), eps=1e-9)
    autocast = torch.autocast(device, dtype=torch.bfloat16) if bf16 else contextlib.nullcontext()
    model.train()

    def step():
        with autocast:
            logits = forward(model, *batch)
        loss, _ = label_smoothed_cross_entropy(logits, batch[2])
        optimizer.zero_grad(set_to_none=True)
        (loss / batch[2].numel()).backward()
        optimizer.step()

    step()  # warm-up: allocations, kernel selection
    _sync(device)
    started = time.perf_counter()
    for _ in range(steps):
        step()
    _sync(device)
    return (time.perf_counter() - started) / steps


def ours_forward(model, src, tgt_in, _tgt_out):
    return model(src, tgt_in)


def marian_forward(model, src, tgt_in, _tgt_out):
    return model(input_ids=src, attention_mask=src != 0, decoder_input_ids=tgt_in).logits


def _sync(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--shapes", nargs="+", default=["small", "base"])
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--length", type=int, default=24, help="source and target tokens per sentence")
    parser.add_argument("--tokens", type=int, default=1536, help="target tokens per batch")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--precisions", nargs="+", choices=["fp32", "bf16"], default=None,
                        help="default: fp32, and bf16 where the device runs it natively")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    device = args.device
    found = detect_device(device)
    precisions = args.precisions or native_precisions(found)
    sentences = max(1, args.tokens // args.length)
    generator = torch.Generator().manual_seed(0)
    src = torch.randint(6, VOCAB, (sentences, args.length), generator=generator).to(device)
    tgt_out = torch.randint(6, VOCAB, (sentences, args.length), generator=generator).to(device)
    tgt_in = torch.cat([torch.full((sentences, 1), 2, device=device), tgt_out[:, :-1]], dim=1)
    batch = (src, tgt_in, tgt_out)
    threads = torch.get_num_threads()
    peaks = {precision: measure_matmul_flops(device, precision, threads) for precision in precisions}
    print(f"{found.describe()}, {threads} thread(s); batch {sentences} x {args.length} tokens a side; "
          "measured matmul peak: " + ", ".join(f"{p} {peak / 1e9:,.0f} GFLOP/s" for p, peak in peaks.items()))
    if not found.bf16 and "bf16" not in precisions:
        print(f"bf16 skipped: {found.why}")
    print()
    print("| shape | model | precision | params | s/step | target tokens/s | GFLOP/s | MFU |")
    print("|---|---|---|---:|---:|---:|---:|---:|")
    for shape in args.shapes:
        config = TRANSFORMER_PRESETS[shape]
        for precision in precisions:
            for name, build, forward in (("ours", lambda: Transformer(config, VOCAB, VOCAB), ours_forward),
                                         ("MarianMTModel", lambda: marian_like(config), marian_forward)):
                torch.manual_seed(0)
                model = build().to(device)
                ours = Transformer(config, VOCAB, VOCAB)
                flops = training_flops(ours, args.length, args.length) * sentences
                seconds = time_steps(model, forward, batch, args.steps, precision == "bf16", device)
                params = sum(p.numel() for p in {id(p): p for p in model.parameters()}.values())
                achieved = flops / seconds
                print(f"| {shape} | {name} | {precision} | {params / 1e6:.1f}M | {seconds:.3f} | "
                      f"{sentences * args.length / seconds:,.0f} | {achieved / 1e9:,.1f} | "
                      f"{achieved / peaks[precision]:.1%} |", flush=True)
                del model


if __name__ == "__main__":
    main()
