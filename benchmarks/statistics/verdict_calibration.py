"""How often the report's verdicts are wrong when seeds behave as real runs do, measured
through the report's own comparison path.

``statistics_calibration.py`` checks the test's algebra on friendly seeds: normal
offsets, equal spreads, one output length for every seed. Real runs are messier: a
seed collapses now and then (at 1e11 FLOPs two of a Transformer's three seeds wrote one
sentence for most inputs), one recipe's seeds spread several times another's, a seed's
outputs run shorter (so its brevity penalty differs), and the size a family is compared
at was picked as the best on the same seeds' validation loss. Each simulated study here
is two families, "a" and "b", three seeds each, one budget, and goes through
``stages.report.comparison.compare_systems``, the path ``nmt report`` takes after
scoring: the translation gate's withholding, each family's best size on validation loss
(``primary.family_bests``), the primary comparison's Welch-Satterthwaite test and Holm.

The seeds' sentence-level BLEU statistics come from ``statistics_calibration.Simulator``
(Multi30k test2016 reference lengths, shared sentence difficulty, each recipe's own
strength per sentence, each seed's own offset and sentence noise). A case sets, per
family, the seeds' spread (BLEU), the chance that a seed collapses and by how much,
whether a collapse fails the translation gate, how much a seed's output length varies,
and how many sizes the family has. Each recipe's expected BLEU is computed (not
assumed) from its offsets' distribution, collapses included, and "a difference of d"
means expected BLEU d apart; so under the null a recipe whose seeds collapse is as good
on average as one whose seeds never do.

For each case the table gives: the share of studies the gate withheld (a family did
not translate); among the rest, whether the report words a verdict (from three seeds a
side; with two it gives the difference and its interval only), how often the test's p
falls under 0.05 and under 0.001 where the recipes do not differ (what a verdict would
have said, worded or not), how often the seeds agreed (their term under a tenth of the
test set's, which the report's row then says), the coverage of the delta's 95% interval
at true differences of 0, 1, 2 and 4 BLEU, and the power at 2 BLEU; then a rule the
report does not apply, measured to see whether it would help: withhold the verdict
where one side's seeds spread more than 7 times the other's.

    python benchmarks/statistics/verdict_calibration.py [--simulations 300] [--seeds 3] [--seed 0]
    python benchmarks/statistics/verdict_calibration.py --seeds 2   # the shipped default's seeds
"""

from __future__ import annotations

import argparse
import math
import platform
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from tqdm import tqdm  # noqa: E402

from benchmarks.statistics.statistics_calibration import (  # noqa: E402
    METRIC,
    NOISE_SD,
    POPULATION,
    QUALITY,
    SENTENCES,
    STRENGTH_SD,
    Simulator,
    binomial_interval,
)
from stages.shared import gate  # noqa: E402
from stages.report.comparison import compare_systems  # noqa: E402
from stages.report.comparison_records import Comparison  # noqa: E402
from stages.report.records import RunRecord  # noqa: E402
from stages.report.resampling import SeededSystem, corpus_scores  # noqa: E402
from stages.report.significance import (  # noqa: E402
    ALPHA,
    P_FLOOR,
    PRIMARY,
    PRIMARY_METRIC,
    SEEDS_AGREED,
    VERDICT_SEEDS,
    seeds_agreed,
)

SEEDS = 3
BUDGET = 1e12
DELTAS = (0.0, 1.0, 2.0, 4.0)  # BLEU between the recipes' expectations, for the coverage columns
POWER_AT = 2.0
VALID_LOSS = 3.0  # nats per token of a recipe's seed at offset 0
VALID_LOSS_PER_LOGIT = 0.2  # a seed's offset moves its validation loss this much per logit
VALID_LOSS_SD = 0.01  # the validation split's own noise on a seed's loss


@dataclass(frozen=True)
class Family:
    """How one family's seeds behave in a case."""
    seed_sd: float = 0.7  # BLEU, the seeds' spread without collapses
    collapse: float = 0.0  # the chance that a seed collapses
    collapse_bleu: float = 6.0  # how much a collapse costs
    collapse_fails_gate: bool = False  # a collapse writes one sentence for most inputs
    length_sd: float = 0.0  # the spread of a seed's log output length
    sizes: int = 1  # sizes of equal expected quality; the report picks one on validation loss


@dataclass(frozen=True)
class Case:
    name: str
    a: Family
    b: Family


CASES = (
    Case("normal seeds, equal spreads (0.7 BLEU)", Family(), Family()),
    Case("normal seeds, spreads 0.2 and 1.4 BLEU (7x)", Family(seed_sd=0.2), Family(seed_sd=1.4)),
    Case("both collapse 1 seed in 3 by 6 BLEU", Family(collapse=1 / 3), Family(collapse=1 / 3)),
    Case("both collapse 1 seed in 2 by 3 BLEU", Family(collapse=0.5, collapse_bleu=3.0),
         Family(collapse=0.5, collapse_bleu=3.0)),
    Case("b collapses 1 seed in 10 by 6 BLEU, a never", Family(), Family(collapse=0.1)),
    Case("b collapses 1 seed in 3 by 6 BLEU, a never", Family(), Family(collapse=1 / 3)),
    Case("b collapses 1 seed in 3, failing the gate; a never", Family(),
         Family(collapse=1 / 3, collapse_fails_gate=True)),
    Case("output lengths vary by seed (5%)", Family(length_sd=0.05), Family(length_sd=0.05)),
    Case("best of 2 sizes per family on validation loss", Family(sizes=2), Family(sizes=2)),
)


class World:
    """The simulator, and the map from BLEU to its logits: a recipe's quality (logit)
    for an expected BLEU, computed from the population's expected n-gram counts."""

    def __init__(self, seed: int):
        self.simulator = Simulator(0.0, seed)
        self.rng = self.simulator.rng
        # One fixed draw of each sentence's recipe strength and seed noise: expected
        # counts over the whole population, no binomial noise, so that BLEU is a smooth
        # function of the logit.
        fixed = np.random.default_rng(seed + 1)
        self.shift = (-self.simulator.difficulty + fixed.normal(0.0, STRENGTH_SD, POPULATION)
                      + fixed.normal(0.0, NOISE_SD, POPULATION))
        self.reference = self.simulator.reference_length.astype(float)
        low, self.baseline_bleu, high = self.bleu(np.array([QUALITY - 0.05, QUALITY, QUALITY + 0.05]))
        self.bleu_per_logit = (high - low) / 0.1

    def bleu(self, logits: np.ndarray) -> np.ndarray:
        """Corpus BLEU from expected counts over the population, one per logit."""
        unigram = 1.0 / (1.0 + np.exp(-(logits[:, None] + self.shift[None, :])))
        totals = np.zeros((len(logits), 10))
        totals[:, 0] = totals[:, 1] = self.reference.sum()
        for n in range(1, 5):
            count = np.maximum(self.reference - n + 1, 0)
            totals[:, 5 + n] = count.sum()
            totals[:, 1 + n] = (count[None, :] * unigram ** n).sum(axis=1)
        return corpus_scores(METRIC, totals)

    def logit(self, bleu: float) -> float:
        return bleu / self.bleu_per_logit

    def expected_bleu(self, quality: float, family: Family) -> float:
        """A recipe's expected seed BLEU: its offsets' normal spread by Gauss-Hermite
        quadrature, a collapse's share at its lower logit."""
        nodes, weights = np.polynomial.hermite_e.hermegauss(21)
        weights = weights / weights.sum()
        spread = self.logit(family.seed_sd)
        steady = float(weights @ self.bleu(quality + spread * nodes))
        if not family.collapse or family.collapse_fails_gate:
            # A gate-failing collapse is never compared: the recipe is judged on the
            # runs that translate (the report withholds the rest).
            return steady
        collapsed = float(weights @ self.bleu(quality - self.logit(family.collapse_bleu) + spread * nodes))
        return (1 - family.collapse) * steady + family.collapse * collapsed

    def quality_for(self, target: float, family: Family) -> float:
        """The recipe logit whose expected seed BLEU is ``target`` (bisection)."""
        low, high = QUALITY - 3.0, QUALITY + 3.0
        for _ in range(50):
            middle = (low + high) / 2
            low, high = (middle, high) if self.expected_bleu(middle, family) < target else (low, middle)
        return (low + high) / 2


def seed_statistics(world: World, quality: float, family: Family, sentences: np.ndarray,
                    rng: np.random.Generator, seeds: int = SEEDS) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """One recipe's seeds on one test set: (statistics (K, N, 10), each seed's logit
    offset, whether it collapsed)."""
    offsets = rng.normal(0.0, world.logit(family.seed_sd), size=seeds)
    collapsed = rng.random(seeds) < family.collapse
    drop = world.logit(family.collapse_bleu) if not family.collapse_fails_gate else 4.0  # one sentence: near 0 BLEU
    offsets = offsets - collapsed * drop
    statistics = world.simulator.seeds(quality + offsets, sentences, rng.normal(0.0, family.length_sd, size=seeds))
    return statistics, offsets, collapsed


def study(world: World, case: Case, qualities: dict[str, float], rng: np.random.Generator,
          seeds: int = SEEDS) -> tuple[list, dict]:
    """One simulated study: the run records and each group's seeds' statistics, as
    ``compare_systems`` takes them."""
    sentences = world.simulator.test_set()
    records, systems = [], {}
    for family_name, family in (("a", case.a), ("b", case.b)):
        for size in range(family.sizes):
            model = f"{family_name}_w{size + 1}"
            statistics, offsets, collapsed = seed_statistics(world, qualities[family_name], family, sentences, rng,
                                                             seeds)
            systems[model] = SeededSystem(model, tuple(range(1, seeds + 1)), {PRIMARY_METRIC: statistics})
            scores = corpus_scores(METRIC, statistics.sum(axis=1))
            for seed in range(seeds):
                fails = bool(collapsed[seed] and family.collapse_fails_gate)
                records.append(run_record(model, family_name, size, seed + 1, float(scores[seed]),
                                          VALID_LOSS - VALID_LOSS_PER_LOGIT * offsets[seed]
                                          + rng.normal(0.0, VALID_LOSS_SD), fails))
    return records, systems


def run_record(model: str, family: str, size: int, seed: int, bleu: float, valid_loss: float,
               fails_gate: bool) -> RunRecord:
    """A report's record of one run, with the fields the comparison reads."""
    parameters = 1_000_000 * (size + 1)
    return RunRecord(name=f"{model}_s{seed}", model=model, seed=seed, budget=BUDGET, family=family,
                     preset=f"w{size + 1}", parameters=parameters, non_embedding_parameters=parameters // 2,
                     train_flops=BUDGET, train_tokens=BUDGET / (6 * parameters), stop_reason="max_train_flops",
                     bleu=bleu, chrf=None, final_valid_loss=valid_loss, best_valid_ppl=math.exp(valid_loss),
                     translates=gate.DOES_NOT if fails_gate else gate.TRANSLATES,
                     gate_reasons=["72% of its test outputs are one line"] if fails_gate else [],
                     source_use=0.05 if fails_gate else 1.0)


def primary_row(comparison: Comparison) -> dict | None:
    """The study's one primary BLEU row, None where no verdict was given."""
    rows = [row for row in comparison.tests if row["role"] == PRIMARY and row["metric"] == PRIMARY_METRIC]
    return rows[0] if rows else None


# A rule the report could add, measured here rather than assumed: withhold a verdict
# where one side's seeds spread more than this many times the other's.
SPREAD_RATIO = 7.0


def spread_ratio(comparison: Comparison, row: dict) -> float:
    """The larger of the two compared groups' seed standard deviations (BLEU) over the smaller."""
    spreads = [group["bleu"]["std"] for group in comparison.groups if group["label"] in (row["a"], row["b"])]
    return max(spreads) / max(min(spreads), 1e-9)


def run_case(world: World, case: Case, simulations: int, bar, seeds: int = SEEDS) -> dict:
    """Per true delta: verdicts given, rejections among them, interval coverage; and the
    same under the spread-ratio rule."""
    results = {}
    base_a = world.quality_for(world.baseline_bleu, case.a)
    for delta in DELTAS:
        qualities = {"a": base_a, "b": world.quality_for(world.baseline_bleu + delta, case.b)}
        found = {"given": 0, "rejected": 0, "tiny": 0, "worded": 0, "agreed": 0, "covered": 0, "ratio_given": 0,
                 "ratio_rejected": 0}
        for _ in range(simulations):
            records, systems = study(world, case, qualities, world.rng, seeds)
            comparison = compare_systems(records, systems, randomization_trials=0)
            row = primary_row(comparison)
            bar.update(1)
            if row is None:
                continue
            found["given"] += 1
            # The test's own decision, whether or not the report words it as a verdict
            # (it does from VERDICT_SEEDS seeds a side): one primary row, so Holm's p is p.
            found["rejected"] += row["p"] < ALPHA
            found["tiny"] += row["p"] < P_FLOOR
            found["worded"] += row["significant"] is not None
            found["agreed"] += seeds_agreed(row)
            # The delta is b - a where the primary pair is declared (a, b).
            sign = 1.0 if row["a"].startswith("a_") else -1.0
            found["covered"] += row["delta_low"] <= sign * delta <= row["delta_high"]
            if spread_ratio(comparison, row) <= SPREAD_RATIO:
                found["ratio_given"] += 1
                found["ratio_rejected"] += row["p"] < ALPHA
        results[delta] = found
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--simulations", type=int, default=300, help="studies per case and delta (default 300)")
    parser.add_argument("--seeds", type=int, default=SEEDS, help=f"seeds a family (default {SEEDS})")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    started = time.time()
    world = World(args.seed)
    bar = tqdm(total=len(CASES) * len(DELTAS) * args.simulations, desc="simulated studies", unit="study",
               file=sys.stderr)
    results = {case.name: run_case(world, case, args.simulations, bar, args.seeds) for case in CASES}
    bar.close()
    print(f"Studies per case and delta: {args.simulations}; two families, {args.seeds} seeds each, one budget; test sets "
          f"of {SENTENCES} sentences drawn from {POPULATION:,}; baseline {world.baseline_bleu:.1f} BLEU; through "
          f"stages.report.comparison.compare_systems (the gate, the best size on validation loss, the primary "
          f"test, Holm). {platform.processor() or platform.machine()}, {time.time() - started:.0f} s.")
    print()
    print(f"| case | withheld by the gate | verdict worded ({VERDICT_SEEDS}+ seeds a side) | p < {ALPHA} under no "
          f"difference | p < {P_FLOOR:g} under no difference | seeds agreed (seed term < {SEEDS_AGREED:.0%} of the "
          "test set's) | " + " | ".join(f"coverage at {delta:g} BLEU" for delta in DELTAS)
          + f" | power at {POWER_AT:g} BLEU | also withheld where spreads differ > {SPREAD_RATIO:g}x | "
          f"p < {ALPHA} then |")
    print("|---|---:|---:|---|---|---:|" + "---|" * len(DELTAS) + "---:|---:|---|")
    for case in CASES:
        found = results[case.name]
        null = found[0.0]
        withheld = 1 - null["given"] / args.simulations
        rate = lambda count, total: binomial_interval(count / total, total) if total else "-"  # noqa: E731
        coverage = [rate(found[d]["covered"], found[d]["given"]) for d in DELTAS]
        power = found[POWER_AT]
        ratio_withheld = 1 - null["ratio_given"] / max(1, null["given"])
        print(f"| {case.name} | {100 * withheld:.0f}% | {100 * null['worded'] / max(1, null['given']):.0f}% | "
              f"{rate(null['rejected'], null['given'])} | {rate(null['tiny'], null['given'])} | "
              f"{100 * null['agreed'] / max(1, null['given']):.0f}% | " + " | ".join(coverage)
              + f" | {100 * power['rejected'] / max(1, power['given']):.0f}% | {100 * ratio_withheld:.0f}% | "
              f"{rate(null['ratio_rejected'], null['ratio_given'])} |")
    print()
    print("Rates with their Wilson 95% intervals. A collapse that fails the gate makes its family's group "
          "withheld from every verdict; the recipes are then compared on the runs that translate, so such a "
          "case's null is equal expected BLEU of those runs. Every other collapse stays in the seeds' mean, and "
          "its null is equal expected BLEU over all seeds, collapses included.")


if __name__ == "__main__":
    main()
