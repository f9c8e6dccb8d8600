"""What reseeding the dropout generator costs per batch: ``torch.manual_seed`` against
seeding only the generator the device draws from (stages/train/loop.py ``seed_generator``).
The train loop reseeds at every batch so that a resumed run draws the same dropout masks
(fairseq does the same per update), so this cost is paid once per batch.

    python benchmarks/training/reseed_cost.py [--calls 20000] [--rounds 5]

Prints the median over rounds of the microseconds per call.
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from stages.train.loop import seed_generator


def per_call(seed, calls: int) -> float:
    started = time.perf_counter()
    for i in range(calls):
        seed(i)
    return (time.perf_counter() - started) / calls * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=20000)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if device.type == "cuda":
        torch.zeros(1, device=device)  # CUDA started, as in a training worker
    ways = {"torch.manual_seed": torch.manual_seed, "seed_generator": lambda s: seed_generator(device, s)}
    rounds = {name: [] for name in ways}
    for _ in range(args.rounds):  # the two take turns, so that a slow spell slows both
        for name, seed in ways.items():
            rounds[name].append(per_call(seed, args.calls))
    print(f"device: {device}, torch {torch.__version__}, {args.calls} calls x {args.rounds} rounds")
    print(f"{'reseed':<20} {'us/call (median)':>17} {'min':>8} {'max':>8}")
    for name, times in rounds.items():
        print(f"{name:<20} {statistics.median(times):>17.2f} {min(times):>8.2f} {max(times):>8.2f}")


if __name__ == "__main__":
    main()
