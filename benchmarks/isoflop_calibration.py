"""How often the report's IsoFLOP intervals hold the truth (stages/report/isoflop.py).

Simulated studies shaped like configs/multi30k_frontier.yaml: four budgets 3e10 to 1e12,
three sizes a budget (four at the largest) half an octave of width apart, three seeds at
the smallest budget and one elsewhere. Each budget's true profile is a parabola in log10
non-embedding parameters, its minimum at N_opt = n0 (C / 3e10)^a, plus seed noise. The
report's own code fits each simulated study; the table gives how often the 95% intervals
of a and of each budget's N_opt hold the true values, and how often each budget's
minimum was found interior. What it does not measure: a true profile that is not a
parabola (asymmetric in log parameters), which biases the minimum whatever the noise.

    python benchmarks/isoflop_calibration.py                      # defaults: about 20 s
    python benchmarks/isoflop_calibration.py --sd 0.03 --curvature 0.4 --studies 1000
"""

from __future__ import annotations

import argparse
import math

import numpy as np
from rich.console import Console
from rich.table import Table
from tqdm import tqdm

from stages.report import isoflop

BUDGETS = (3e10, 1e11, 3e11, 1e12)
WIDTHS = {3e10: (12, 16, 24), 1e11: (12, 16, 24), 3e11: (16, 24, 32), 1e12: (24, 32, 48, 64)}
SEEDS = {3e10: 3, 1e11: 1, 3e11: 1, 1e12: 1}


def non_embedding(width: int) -> float:
    return 82.0 * width ** 2  # the Transformer's w12 to w64 (docs/models.md), within 5%


def study(a: float, n0: float, curvature: float, sd: float, rng: np.random.Generator) -> list[dict]:
    groups = []
    for budget in BUDGETS:
        log_opt = math.log10(n0) + a * math.log10(budget / BUDGETS[0])
        for width in WIDTHS[budget]:
            n = non_embedding(width)
            true = 3.0 + curvature * (math.log10(n) - log_opt) ** 2
            each = list(true + sd * rng.standard_normal(SEEDS[budget]))
            groups.append({"family": "simulated", "budget": budget, "model": f"m.w{width}", "preset": f"w{width}",
                           "parameters": n + 1000 * width, "non_embedding_parameters": n,
                           "train_tokens": budget / (6 * n), "train_flops": budget,
                           "valid_loss": {"mean": float(np.mean(each)), "each": each}})
    return groups


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--studies", type=int, default=500)
    parser.add_argument("--a", type=float, default=0.5, help="the true exponent of N_opt")
    parser.add_argument("--n0", type=float, default=2.2e4, help="the true N_opt at 3e10 (non-embedding)")
    parser.add_argument("--curvature", type=float, default=0.5, help="loss per (decade of parameters)^2")
    parser.add_argument("--sd", type=float, default=0.02, help="seed standard deviation of the final loss")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    rng = np.random.default_rng(args.seed)
    exponent_held, exponent_given = 0, 0
    interior = {budget: 0 for budget in BUDGETS}
    optimum_held = {budget: 0 for budget in BUDGETS}
    optimum_given = {budget: 0 for budget in BUDGETS}
    widths = []
    for _ in tqdm(range(args.studies), desc="simulated studies", unit="study"):
        (entry,) = isoflop.profiles(study(args.a, args.n0, args.curvature, args.sd, rng),
                                    seed=int(rng.integers(1 << 31)))
        for profile in entry["profiles"]:
            budget = profile["budget"]
            if profile["optimum"] is None:
                continue
            interior[budget] += 1
            truth = args.n0 * (budget / BUDGETS[0]) ** args.a
            if profile["optimum"].get("interval"):
                optimum_given[budget] += 1
                low, high = profile["optimum"]["interval"]
                optimum_held[budget] += low <= truth <= high
        fitted = entry["parameters"]
        if fitted["interval"]:
            exponent_given += 1
            exponent_held += fitted["interval"][0] <= args.a <= fitted["interval"][1]
            widths.append(fitted["interval"][1] - fitted["interval"][0])
    table = Table("quantity", "found interior", "interval given", "95% interval holds the truth",
                  title=f"{args.studies} simulated studies: a = {args.a}, N_opt(3e10) = {args.n0:.3g}, "
                        f"curvature {args.curvature}, seed sd {args.sd}")
    for budget in BUDGETS:
        given = optimum_given[budget]
        table.add_row(f"N_opt at {budget:.0e}", f"{interior[budget] / args.studies:.1%}",
                      f"{given / args.studies:.1%}",
                      f"{optimum_held[budget] / given:.1%}" if given else "-")
    table.add_row("a (exponent of N_opt)", "-", f"{exponent_given / args.studies:.1%}",
                  f"{exponent_held / exponent_given:.1%} (median width {np.median(widths):.2f})"
                  if exponent_given else "-")
    Console().print(table)


if __name__ == "__main__":
    main()
