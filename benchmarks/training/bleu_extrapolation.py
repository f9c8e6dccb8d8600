"""How much more compute a model needs for a target BLEU, read off its validation curve.

Fits valid BLEU = a + b * log10(training FLOPs) to the BLEU validations of a train
artifact's ``metrics.jsonl`` after ``--skip-fraction`` of the run (the early points lie
on the steep part of the curve), and shifts the target by the gap measured at the end
of the run between the curve's last point (valid split, cased, greedy, the last
weights) and the evaluate stage's lowercased beam BLEU on the test split (averaged
weights): the target is in the literature's terms, the fit in the curve's.

A log-linear curve keeps rising; real curves bend over, so the FLOPs printed are a
lower bound, and the further the target lies beyond the data, the looser it is.

    python benchmarks/training/bleu_extrapolation.py TRAIN_DIR EVALUATE_DIR --targets 34 36 38 40
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from stages.evaluate.artifact import read_scores  # noqa: E402
from stages.train.artifact import read_summary  # noqa: E402


def bleu_points(train_dir: Path) -> list[dict]:
    rows = [json.loads(line) for line in (train_dir / "metrics.jsonl").read_text().splitlines() if line.strip()]
    return [row for row in rows if "valid_bleu" in row]


def fit(points: list[dict], skip_fraction: float) -> tuple[float, float]:
    kept = points[int(len(points) * skip_fraction):]
    if len(kept) < 2:
        raise SystemExit("fewer than 2 BLEU validations to fit: lower --skip-fraction or train longer")
    slope, intercept = np.polyfit([math.log10(p["train_flops"]) for p in kept], [p["valid_bleu"] for p in kept], 1)
    return float(intercept), float(slope)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("train_dir", type=Path)
    parser.add_argument("evaluate_dir", type=Path)
    parser.add_argument("--targets", type=float, nargs="+", default=[34, 36, 38, 40, 41])
    parser.add_argument("--skip-fraction", type=float, default=0.4)
    args = parser.parse_args()

    points = bleu_points(args.train_dir)
    report = read_summary(args.train_dir)
    scores = read_scores(args.evaluate_dir)
    intercept, slope = fit(points, args.skip_fraction)
    gap = scores.beam.bleu_lc - points[-1]["valid_bleu"]
    flops_per_second = report.flops_per_second
    flops_per_token = report.train_flops / report.train_tokens
    print(f"fit: valid BLEU = {intercept:.2f} + {slope:.2f} * log10(FLOPs) over {len(points)} validations "
          f"(the last {len(points) - int(len(points) * args.skip_fraction)} fitted)")
    print(f"run: {report.train_flops:.2e} FLOPs, {report.train_tokens:,} target tokens, "
          f"{flops_per_second / 1e9:.1f} GFLOP/s; test BLEU lc (beam, averaged) {scores.beam.bleu_lc:.2f} = "
          f"last valid BLEU {points[-1]['valid_bleu']:.2f} {gap:+.2f}")
    print()
    print("| test BLEU lc | FLOPs needed | x this run | target tokens | hours at this run's FLOP/s |")
    print("|---:|---:|---:|---:|---:|")
    for target in args.targets:
        if slope <= 0:
            print(f"| {target:.0f} | - | - | - | - |")
            continue
        flops = 10 ** ((target - gap - intercept) / slope)
        print(f"| {target:.0f} | {flops:.2e} | {flops / report.train_flops:.1f}x | "
              f"{flops / flops_per_token / 1e6:,.1f}M | {flops / flops_per_second / 3600:,.1f} |")


if __name__ == "__main__":
    main()
