"""The attention RNN's update time with and without the hid2out bottleneck, side by
side in one run.

The output layer (attentional vector -> vocabulary) is most of an RNN update at a
10k vocabulary. nmtpytorch narrows the attentional vector to the embedding width and
ties the output layer to the target embedding; ``attentional_dim`` and
``tie_embeddings`` do the same here (stages/shared/models/rnn/model.py). Both variants train
on the same random batch with Adam; they take turns, a few steps each per round, and
the table reports the median round, so a machine that slows down for a while slows both.

    python benchmarks/training/rnn_output_layer.py                  # the converged config's GRU, one thread
    python benchmarks/training/rnn_output_layer.py --threads 2 --tokens 4096
"""

from __future__ import annotations

import argparse
import statistics
import time
from dataclasses import replace

import torch
import torch.nn.functional as F

from stages.shared.models.rnn.config import RnnConfig
from stages.shared.models.rnn.model import RnnTranslator


def update_seconds(model: RnnTranslator, src: torch.Tensor, tgt: torch.Tensor, steps: int) -> float:
    optimizer = torch.optim.Adam(model.parameters())
    started = time.perf_counter()
    for _ in range(steps):
        logits = model(src, tgt[:, :-1])
        loss = F.cross_entropy(logits.reshape(-1, logits.size(-1)), tgt[:, 1:].reshape(-1))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    return (time.perf_counter() - started) / steps


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--vocab", type=int, default=10000)
    parser.add_argument("--embed-dim", type=int, default=128)
    parser.add_argument("--hidden", type=int, default=256)
    parser.add_argument("--length", type=int, default=16, help="source and target tokens per sentence")
    parser.add_argument("--tokens", type=int, default=2048, help="target tokens per update")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--steps", type=int, default=3, help="updates per model per round")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)

    base = RnnConfig(cell="gru", embed_dim=args.embed_dim, hidden=args.hidden, encoder_layers=1, decoder_layers=1,
                     attention="additive", dropout=0.4)
    variants = {
        f"attentional {args.hidden}, untied": base,
        f"attentional {args.embed_dim}, tied (hid2out)": replace(base, attentional_dim=args.embed_dim,
                                                                 tie_embeddings=True),
    }
    torch.manual_seed(0)
    models = {name: RnnTranslator(config, args.vocab, args.vocab) for name, config in variants.items()}
    sentences = max(1, args.tokens // args.length)
    src = torch.randint(4, args.vocab, (sentences, args.length))
    tgt = torch.randint(4, args.vocab, (sentences, args.length + 1))
    for model in models.values():
        update_seconds(model, src, tgt, 1)  # warm-up
    rounds: dict[str, list[float]] = {name: [] for name in models}
    for _ in range(args.rounds):
        for name, model in models.items():
            rounds[name].append(update_seconds(model, src, tgt, args.steps))

    print(f"GRU, embeddings {args.embed_dim}, hidden {args.hidden}, vocabulary {args.vocab}; {sentences} x "
          f"{args.length} target tokens an update; {args.threads} thread(s); median of {args.rounds} rounds\n")
    print("| variant | params | ms/update | target tokens/s | speedup |")
    print("|---|---:|---:|---:|---:|")
    first = None
    for name, model in models.items():
        seconds = statistics.median(rounds[name])
        first = first or seconds
        params = sum(p.numel() for p in model.parameters())
        print(f"| {name} | {params / 1e6:.2f}M | {seconds * 1000:.0f} | {sentences * args.length / seconds:,.0f} | "
              f"{first / seconds:.2f}x |")


if __name__ == "__main__":
    main()
