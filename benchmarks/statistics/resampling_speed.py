"""How long the report's seed-aware statistics take (``stages/report/resampling.py``):
three systems x three seeds x 1,000 Multi30k test sentences, every metric (BLEU, chrF,
chrF++), a 95% interval per system (1,000 bootstrap resamples) and, per pair, the paired
bootstrap (1,000 resamples) and approximate randomization (10,000 trials).
Pinned to one core (numpy's BLAS threads too); prints a table of the phases.

    python benchmarks/statistics/resampling_speed.py [--sentences 1000] [--seeds 3] [--systems 3]
"""

from __future__ import annotations

import os

# One core: set before numpy loads its BLAS.
for variable in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[variable] = "1"

import argparse  # noqa: E402
import gzip  # noqa: E402
import itertools  # noqa: E402
import platform  # noqa: E402
import random  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from pipeline.core.hardware import detect_device  # noqa: E402
from stages.report.resampling import (  # noqa: E402
    BOOTSTRAP_SAMPLES,
    RANDOMIZATION_TRIALS,
    bootstrap_counts,
    paired_bootstrap,
    paired_randomization,
    seeded_system,
)
from stages.report.significance import confidence_intervals, metrics  # noqa: E402

CORPUS = Path(os.environ.get("NMT_CORPORA") or REPO / "corpora") / "multi30k"


def degraded(references: list[str], rate: float, seed: int) -> list[str]:
    generator = random.Random(seed)
    return [" ".join(word for word in line.split() if generator.random() > rate) or line for line in references]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sentences", type=int, default=1000)
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--systems", type=int, default=3)
    args = parser.parse_args()
    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {sorted(os.sched_getaffinity(0))[0]})
    with gzip.open(CORPUS / "test_2016_flickr.de.gz", "rt", encoding="utf-8") as lines:
        references = lines.read().splitlines()[:args.sentences]

    phases = {}
    started = time.perf_counter()
    systems = [seeded_system(f"s{index}", list(range(args.seeds)),
                             [(degraded(references, 0.15 + 0.05 * index, 10 * index + seed), references)
                              for seed in range(args.seeds)], metrics())
               for index in range(args.systems)]
    phases["sentence statistics (sacreBLEU's extraction)"] = time.perf_counter() - started

    started = time.perf_counter()
    counts = bootstrap_counts(len(references), BOOTSTRAP_SAMPLES)
    for one in systems:
        confidence_intervals(one, counts)
    phases[f"intervals ({BOOTSTRAP_SAMPLES} resamples)"] = time.perf_counter() - started

    started = time.perf_counter()
    for first, second in itertools.combinations(systems, 2):
        for name, metric in metrics().items():
            paired_bootstrap(first, second, name, metric, counts)
    phases[f"paired bootstrap ({BOOTSTRAP_SAMPLES} resamples)"] = time.perf_counter() - started

    started = time.perf_counter()
    for first, second in itertools.combinations(systems, 2):
        for name, metric in metrics().items():
            paired_randomization(first, second, name, metric, RANDOMIZATION_TRIALS)
    phases[f"approximate randomization ({RANDOMIZATION_TRIALS} trials)"] = time.perf_counter() - started

    resampling = sum(seconds for phase, seconds in phases.items() if not phase.startswith("sentence"))
    print(f"{detect_device('cpu').describe()}, one core; Python {platform.python_version()}; {args.systems} systems x "
          f"{args.seeds} seeds x {len(references)} sentences; BLEU, chrF and chrF++\n")
    print("| phase | seconds |\n|---|---:|")
    for phase, seconds in phases.items():
        print(f"| {phase} | {seconds:.2f} |")
    print(f"| resampling and tests (target: at most 10 s) | {resampling:.2f} |")
    print(f"| all | {sum(phases.values()):.2f} |")


if __name__ == "__main__":
    main()
