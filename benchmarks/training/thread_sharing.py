"""Two torch processes side by side on one machine: each at torch's default thread count
(as many as the cores) against each at its share of the cores.

Why it matters: pytest runs the suite two files at a time (``-n 2``), and every process a
test starts computes with torch. OpenMP's threads spin while they wait, so two processes
that each run one thread per core take turns badly. tests/conftest.py gives each pytest
worker its share of the cores; this measures what that saves.

    python benchmarks/training/thread_sharing.py [--repeats 3] [--updates 300]

Prints, per setting, the seconds of one training loop run alone and of each of two run at
once (medians over the repeats).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys

# A small training loop with the layers our models use (linear layers and an LSTM).
WORKLOAD = """
import sys, time, torch
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.ReLU(), torch.nn.Linear(512, 256))
lstm = torch.nn.LSTM(128, 128, batch_first=True)
optimizer = torch.optim.Adam(list(model.parameters()) + list(lstm.parameters()))
x, sequences = torch.randn(64, 256), torch.randn(16, 20, 128)
started = time.perf_counter()
for _ in range(int(sys.argv[1])):
    loss = model(x).pow(2).mean() + lstm(sequences)[0].mean()
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
print(time.perf_counter() - started)
"""


def run_side_by_side(copies: int, threads: int | None, updates: int) -> list[float]:
    """Seconds of each of ``copies`` loops started at once; ``threads`` None: torch's default."""
    environment = {key: value for key, value in os.environ.items()
                   if key not in ("OMP_NUM_THREADS", "MKL_NUM_THREADS")}
    if threads is not None:
        environment["OMP_NUM_THREADS"] = environment["MKL_NUM_THREADS"] = str(threads)
    processes = [subprocess.Popen([sys.executable, "-c", WORKLOAD, str(updates)], env=environment,
                                  stdout=subprocess.PIPE, text=True) for _ in range(copies)]
    return [float(process.communicate()[0]) for process in processes]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--updates", type=int, default=300)
    args = parser.parse_args()
    cores = len(os.sched_getaffinity(0))
    print(f"{cores} cores; {args.updates} updates a loop; medians over {args.repeats} repeats\n")
    print("| threads a process | alone (s) | two at once, each (s) | slowdown |")
    print("|---|---:|---:|---:|")
    for label, threads in ((f"default ({cores})", None), (f"its share ({max(1, cores // 2)})", max(1, cores // 2))):
        alone = statistics.median(run_side_by_side(1, threads, args.updates)[0] for _ in range(args.repeats))
        paired = statistics.median(seconds for _ in range(args.repeats)
                                   for seconds in run_side_by_side(2, threads, args.updates))
        print(f"| {label} | {alone:.2f} | {paired:.2f} | {paired / alone:.1f}x |")


if __name__ == "__main__":
    main()
