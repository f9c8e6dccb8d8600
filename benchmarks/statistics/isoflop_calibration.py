"""What an IsoFLOP study can resolve at a given noise: how often each budget's minimum is
found inside its window of sizes, how often the report gives an interval, and how often
the 95% intervals of N_opt and of the exponent a hold the truth (stages/report/isoflop.py).

Simulated studies: four budgets 3e10 to 1e12 (the frontier config's), at each a window of
``--window`` sizes half an octave of width apart (parameters outside the embeddings
doubling from one to the next), centred within a quarter of a step of the true optimum,
as a designer who knows roughly where it is would place them; ``--seeds`` seeds at every
size. The true profile at each budget is a parabola in log10 non-embedding parameters
(``--curvature``, loss per decade squared), its minimum at N_opt = 2e4 (C / 3e10)^a, and
each seed's final loss adds normal noise (``--sd``). The report's own code fits each
study. The true optima lie on a straight line in log-log, so every rejection by the
lack-of-fit test (``isoflop.lack_of_fit``) is a false one. Not measured: a true profile that is not a parabola, which biases the minimum
whatever the noise, and noise that differs between sizes (a learning rate tuned for one
size that suits another less).

    python benchmarks/statistics/isoflop_calibration.py                       # the grid below, seconds
    python benchmarks/statistics/isoflop_calibration.py --window 5 --seeds 3 --sd 0.14 --curvature 1.5
"""

from __future__ import annotations

import argparse
import itertools
import math

import numpy as np
from rich.console import Console
from rich.table import Table
from tqdm import tqdm

from stages.report import isoflop
from stages.report.comparison_records import GroupSummary, Spread

BUDGETS = (3e10, 1e11, 3e11, 1e12)
STEP = math.log10(2)  # one half-octave of width: non-embedding parameters double
N0 = 2e4  # the true N_opt at 3e10, about the Transformer's measured one (non-embedding)
UNSCORED = Spread(mean=None, std=None, each=[])


def study(a: float, window: int, seeds: int, curvature: float, sd: float,
          rng: np.random.Generator) -> list[GroupSummary]:
    groups = []
    for budget in BUDGETS:
        log_opt = math.log10(N0) + a * math.log10(budget / BUDGETS[0])
        centre = log_opt + rng.uniform(-STEP / 4, STEP / 4)
        for index in range(window):
            log_n = centre + (index - (window - 1) / 2) * STEP
            n = 10 ** log_n
            each = list(3.0 + curvature * (log_n - log_opt) ** 2 + sd * rng.standard_normal(seeds))
            groups.append(GroupSummary(
                label=f"m.{index}", model=f"m.{index}", family="simulated", budget=budget, preset=f"s{index}",
                parameters=round(n * 1.3), non_embedding_parameters=round(n), seeds=list(range(1, seeds + 1)),
                train_flops=budget, train_tokens=budget / (6 * n), short_of_budget=[], bleu=UNSCORED,
                chrf=UNSCORED, valid_loss=Spread(mean=float(np.mean(each)), std=None, each=each),
                diverged_seeds=[], translates="yes", not_translating=None, source_use=UNSCORED))
    return groups


def simulate(studies: int, a: float, window: int, seeds: int, curvature: float, sd: float, seed: int) -> dict:
    rng = np.random.default_rng(seed)
    counts = {"interior": 0, "interval": 0, "held": 0, "a_interval": 0, "a_open": 0, "a_any": 0, "a_held": 0,
              "line_tested": 0, "line_rejected": 0}
    widths = []
    for _ in tqdm(range(studies), desc=f"window {window}, {seeds} seeds, sd {sd}", unit="study", leave=False):
        (entry,) = isoflop.profiles(study(a, window, seeds, curvature, sd, rng), draws=1000,
                                    seed=int(rng.integers(1 << 31)))
        for profile in entry.profiles:
            if profile["optimum"] is None:
                continue
            counts["interior"] += 1
            if profile["optimum"].get("interval"):
                counts["interval"] += 1
                low, high = profile["optimum"]["interval"]
                counts["held"] += low <= N0 * (profile["budget"] / BUDGETS[0]) ** a <= high
        fitted = entry.parameters
        if fitted.get("lack_of_fit"):  # the true optima lie on a line: every rejection is a false one
            counts["line_tested"] += 1
            counts["line_rejected"] += fitted["lack_of_fit"]["rejects"]
        if fitted["interval"]:  # a bound may be open (None): it holds the truth on that side
            low, high = fitted["interval"]
            counts["a_any"] += 1
            counts["a_held"] += (low is None or low <= a) and (high is None or a <= high)
            counts["a_interval"] += low is not None and high is not None
            counts["a_open"] += (low is None) != (high is None)
            if low is not None and high is not None:
                widths.append(high - low)
    profiles = studies * len(BUDGETS)
    return {"interior": counts["interior"] / profiles, "interval": counts["interval"] / profiles,
            "held": counts["held"] / counts["interval"] if counts["interval"] else None,
            "a_interval": counts["a_interval"] / studies, "a_open": counts["a_open"] / studies,
            "a_held": counts["a_held"] / counts["a_any"] if counts["a_any"] else None,
            "a_width": float(np.median(widths)) if widths else None,
            "line_tested": counts["line_tested"] / studies,
            "line_rejected": counts["line_rejected"] / counts["line_tested"] if counts["line_tested"] else None}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--studies", type=int, default=200)
    parser.add_argument("--a", type=float, default=0.5, help="the true exponent of N_opt")
    parser.add_argument("--window", type=int, nargs="+", default=[3, 5], help="sizes per budget")
    parser.add_argument("--seeds", type=int, nargs="+", default=[1, 3], help="seeds per size, every budget")
    parser.add_argument("--curvature", type=float, nargs="+", default=[1.5], help="loss per decade^2")
    parser.add_argument("--sd", type=float, nargs="+", default=[0.05, 0.14], help="seed sd of the final loss")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    table = Table("sizes a budget", "seeds a size", "curvature", "seed sd", "minimum interior",
                  "N_opt interval given", "N_opt 95% holds", "a: both bounds", "a: one bound",
                  "a: 95% holds (open bounds too)", "a: median width", "line tested",
                  "line rejected (false, target 5%)",
                  title=f"{args.studies} simulated studies a row: 4 budgets 3e10 to 1e12, true a = {args.a}")
    for window, seeds, curvature, sd in itertools.product(args.window, args.seeds, args.curvature, args.sd):
        found = simulate(args.studies, args.a, window, seeds, curvature, sd, args.seed)
        share = lambda value: "-" if value is None else f"{value:.1%}"  # noqa: E731
        table.add_row(str(window), str(seeds), f"{curvature:g}", f"{sd:g}", share(found["interior"]),
                      share(found["interval"]), share(found["held"]), share(found["a_interval"]),
                      share(found["a_open"]), share(found["a_held"]),
                      "-" if found["a_width"] is None else f"{found['a_width']:.2f}", share(found["line_tested"]),
                      share(found["line_rejected"]))
    Console(width=160).print(table)


if __name__ == "__main__":
    main()
