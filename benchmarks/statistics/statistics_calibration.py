"""Whether the report's test and intervals do what they say, measured by simulation.

Systems with a known difference are simulated at the level the report computes from:
sacreBLEU's per-sentence BLEU statistics (lengths, n-gram matches and totals). A
population of test sentences, each with its reference length (Multi30k test2016's
German references) and a difficulty shared by every system, gives each simulated test
set: 1,000 sentences drawn from it. A system is a recipe of quality q (a logit); each of
its seeds trains to q plus a seed offset, and each sentence's n-gram precision is the
logistic of quality + offset - difficulty + the recipe's own strength on that sentence
(shared by its seeds, drawn anew with each test set) + the seed's noise on it. So the
score varies with the seeds and with the test set, as in the frontier study, and two
recipes of equal expected score still differ on any one test set.

For K = 1, 2, 3 and 5 seeds a side, the report's own code (``stages/report``:
``resampled_scores``, ``bootstrap_deltas``, ``welch``) is run on each simulated pair,
and the table gives:

- the false-positive rate at alpha 0.05 with no difference between the recipes (target
  3-7%); with one seed, under no difference between the two trained networks (no seed
  offset), the only question a one-seed test answers, and beside it the recipe question
  it cannot answer (a one-seed row is "untestable" in the report);
- the power at differences of 0.5, 1, 2 and 4 BLEU between the recipes;
- the coverage of the 95% intervals of the delta and of a system's score (target 93-97%);
- the difference detected with 80% power (alone, and first in a Holm family of 6).

Beside the t test, the paired bootstrap's p alone (the test set's variation only) under
the same null, to show what ignoring the seeds does.

A second table shows why a delta's two seed terms share one degrees-of-freedom count
(``welch.delta_test``): normal seed scores, a test-set term of known variance, and the
false-positive rate of the same statistic against t with Satterthwaite's degrees of
freedom counting each seed term apart, and with the two counted together at the smaller
side's K - 1 (the report's), when the two systems' seeds spread alike and when one's
spread seven times the other's.

A third table measures the laws' intervals (``scaling_laws.bootstrap``, seeds
resampled within budgets): data sets drawn from a known saturating law of validation
loss, seven budgets over 1.7 decades, three seeds a budget with 1% noise, and how often
the 95% interval of the exponent alpha holds the true one.

    python benchmarks/statistics/statistics_calibration.py [--simulations 1000] [--seed-sd 0.7]
"""

from __future__ import annotations

import argparse
import gzip
import math
import platform
import sys
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from sacrebleu.metrics import BLEU  # noqa: E402
from scipy import stats  # noqa: E402
from tqdm import tqdm  # noqa: E402

from stages.report import scaling_laws, welch  # noqa: E402
from stages.report.resampling import (  # noqa: E402
    BOOTSTRAP_SAMPLES,
    SeededSystem,
    bootstrap_counts,
    bootstrap_deltas,
    corpus_scores,
    own_sentence_noise,
    resampled_seed_scores,
)
from stages.report.significance import ALPHA, detectable  # noqa: E402

REFERENCES = REPO / "tests" / "data" / "multi30k" / "test_2016_flickr.de.gz"
SENTENCES = 1000  # the test set's size (Multi30k test2016)
POPULATION = 20000  # the sentences test sets are drawn from
QUALITY = -0.35  # the baseline recipe's logit: about 15 BLEU, the study's mid-range at 4e11 FLOPs
DIFFICULTY_SD = 1.0  # per sentence, shared by every system
STRENGTH_SD = 0.3  # per recipe and sentence, shared by the recipe's seeds
NOISE_SD = 0.3  # per seed and sentence
SEEDS = (1, 2, 3, 5)
DELTAS = (0.5, 1.0, 2.0, 4.0)  # BLEU, between recipes, for the power columns
HOLM_FAMILY = 6  # four families at one budget: six primary comparisons
METRIC = BLEU()


class Simulator:
    """Draws test sets and systems' per-sentence BLEU statistics, shape (K, N, 10)."""

    def __init__(self, seed_sd_logit: float, seed: int = 0):
        self.rng = np.random.default_rng(seed)
        with gzip.open(REFERENCES, "rt", encoding="utf-8") as lines:
            lengths = np.array([len(line.split()) for line in lines.read().splitlines()])
        self.reference_length = self.rng.choice(lengths, size=POPULATION)
        self.difficulty = self.rng.normal(0.0, DIFFICULTY_SD, size=POPULATION)
        self.seed_sd_logit = seed_sd_logit

    def test_set(self) -> np.ndarray:
        return self.rng.integers(POPULATION, size=SENTENCES)

    def system(self, quality: float, seeds: int, sentences: np.ndarray, seed_sd: float | None = None) -> np.ndarray:
        spread = self.seed_sd_logit if seed_sd is None else seed_sd
        return self.seeds(quality + self.rng.normal(0.0, spread, size=seeds), sentences)

    def seeds(self, logits: np.ndarray, sentences: np.ndarray, log_lengths: np.ndarray | None = None) -> np.ndarray:
        """The statistics of seeds with the given logits (recipe quality plus each seed's
        offset) on ``sentences``; ``log_lengths``: each seed's log output length relative
        to the references' (0 unless given), on top of each sentence's own variation."""
        count = len(logits)
        strength = self.rng.normal(0.0, STRENGTH_SD, size=(1, len(sentences)))
        logit = (np.asarray(logits)[:, None] - self.difficulty[sentences][None, :] + strength
                 + self.rng.normal(0.0, NOISE_SD, size=(count, len(sentences))))
        unigram = 1.0 / (1.0 + np.exp(-logit))
        reference = np.broadcast_to(self.reference_length[sentences], (count, len(sentences)))
        seed_length = np.zeros((count, 1)) if log_lengths is None else np.asarray(log_lengths)[:, None]
        hypothesis = np.maximum(1, np.rint(reference * np.exp(seed_length + self.rng.normal(0.0, 0.1,
                                                                                             size=reference.shape))))
        statistics = np.zeros((count, len(sentences), 10))
        statistics[..., 0], statistics[..., 1] = hypothesis, reference
        for n in range(1, 5):
            total = np.maximum(hypothesis - n + 1, 0)
            statistics[..., 5 + n] = total
            statistics[..., 1 + n] = self.rng.binomial(total.astype(np.int64), unigram ** n)
        return statistics


def expected_score(simulator: Simulator, quality: float, draws: int, seed_sd: float | None = None) -> float:
    """E[the corpus BLEU of one seed on a test set]: the value the intervals must cover."""
    return float(np.mean([corpus_scores(METRIC, simulator.system(quality, 1, simulator.test_set(), seed_sd)
                                        .sum(axis=1))[0] for _ in range(draws)]))


def quality_for(simulator: Simulator, delta: float, base: float) -> float:
    """The logit whose expected BLEU is ``delta`` above the baseline's (bisection, on the
    whole population without seed offsets: the mean over seeds is the same)."""
    everything = np.arange(POPULATION)
    generator_state = simulator.rng.bit_generator.state

    def bleu(quality: float) -> float:
        simulator.rng.bit_generator.state = generator_state  # the same noise at every step
        return float(corpus_scores(METRIC, simulator.system(quality, 1, everything, 0.0).sum(axis=1))[0])

    target, low, high = bleu(QUALITY) + delta, QUALITY, QUALITY + 3.0
    for _ in range(40):
        middle = (low + high) / 2
        low, high = (middle, high) if bleu(middle) < target else (low, middle)
    simulator.rng.bit_generator.state = generator_state
    simulator.rng.random()  # move on from the bisection's draws
    return (low + high) / 2 - base


def one_pair(simulator: Simulator, counts: np.ndarray, seeds: int, shift: float, seed_sd: float | None) -> dict:
    sentences = simulator.test_set()
    first = SeededSystem("a", tuple(range(seeds)), {"BLEU": simulator.system(QUALITY, seeds, sentences, seed_sd)})
    second = SeededSystem("b", tuple(range(seeds)),
                          {"BLEU": simulator.system(QUALITY + shift, seeds, sentences, seed_sd)})
    first_scores, second_scores = first.seed_scores("BLEU", METRIC), second.seed_scores("BLEU", METRIC)
    per_seed_first = resampled_seed_scores(first, "BLEU", METRIC, counts)
    per_seed_second = resampled_seed_scores(second, "BLEU", METRIC, counts)
    resampled_first, resampled_second = per_seed_first.mean(axis=1), per_seed_second.mean(axis=1)
    noise_first, noise_second = own_sentence_noise(per_seed_first), own_sentence_noise(per_seed_second)
    bootstrap = bootstrap_deltas(float(second_scores.mean() - first_scores.mean()), resampled_first, resampled_second)
    test = welch.delta_test(first_scores, second_scores, bootstrap["variance"], noise_first + noise_second,
                             SENTENCES)
    interval = welch.system_interval(first_scores, float(np.var(resampled_first, ddof=1)), noise_first, SENTENCES)
    return {"test": test, "bootstrap_p": bootstrap["p"], "bootstrap_error": math.sqrt(bootstrap["variance"]),
            "interval": interval}


def cell(simulator: Simulator, counts: np.ndarray, seeds: int, shift: float, simulations: int,
         true_score: float, seed_sd: float | None = None, bar=None) -> dict:
    """Rejection rates and coverages over ``simulations`` pairs."""
    rejected = bootstrap_rejected = delta_covered = score_covered = 0
    errors, degrees, bootstrap_errors = [], [], []
    for _ in range(simulations):
        result = one_pair(simulator, counts, seeds, shift, seed_sd)
        test, interval = result["test"], result["interval"]
        rejected += test["p"] < ALPHA
        bootstrap_rejected += result["bootstrap_p"] < ALPHA
        delta_covered += test["low"] <= 0.0 <= test["high"]  # used under the null only
        score_covered += interval["low"] <= true_score <= interval["high"]
        errors.append(test["standard_error"])
        bootstrap_errors.append(result["bootstrap_error"])
        degrees.append(test["df"] or math.inf)
        if bar is not None:
            bar.update(1)
    error, df = float(np.mean(errors)), float(np.median(degrees))
    return {"rejected": rejected / simulations, "bootstrap_rejected": bootstrap_rejected / simulations,
            "delta_coverage": delta_covered / simulations, "score_coverage": score_covered / simulations,
            "standard_error": error, "df": df, "bootstrap_error": float(np.mean(bootstrap_errors)),
            "detectable": detectable(error, df),
            "detectable_holm": detectable(error, df, alpha=ALPHA / HOLM_FAMILY)}


def seed_sd_logit_for(simulator: Simulator, target: float) -> float:
    """The seed offset (logit) whose seeds' BLEU standard deviation on one test set is
    ``target``: BLEU moves about linearly with the logit near the baseline."""
    everything = np.arange(POPULATION)
    state = simulator.rng.bit_generator.state
    scores = []
    for quality in (QUALITY - 0.05, QUALITY + 0.05):
        simulator.rng.bit_generator.state = state
        scores.append(float(corpus_scores(METRIC, simulator.system(quality, 1, everything, 0.0).sum(axis=1))[0]))
    return target / ((scores[1] - scores[0]) / 0.1)


def law_coverage(data_sets: int, draws: int, seed: int) -> dict:
    """How often the seeds-within-budgets bootstrap's 95% interval of alpha holds the true
    alpha, for loss = 1.8 + 4e6 x C^-0.5 with 1% noise, 7 budgets x 3 seeds."""
    budgets = np.geomspace(1e12, 5e13, 7)
    flops = np.repeat(budgets, 3)
    rng = np.random.default_rng(seed)
    held, widths = 0, []
    for index in tqdm(range(data_sets), desc="law data sets", unit="set", file=sys.stderr):
        loss = (1.8 + 4.0e6 * flops ** -0.5) * (1 + 0.01 * rng.standard_normal(len(flops)))
        low, high = scaling_laws.interval([law.alpha for law in scaling_laws.bootstrap(flops, loss, draws=draws,
                                                                                         seed=index)])
        held += low <= 0.5 <= high
        widths.append(high - low)
    return {"coverage": held / data_sets, "width": float(np.median(widths))}


def degrees_of_freedom_rules(seeds: int, test_variance: float, spreads: tuple[float, float], draws: int,
                             rng: np.random.Generator) -> dict:
    """False-positive rates at alpha 0.05 of the delta's t statistic with each rule for
    its degrees of freedom; seeds normal with the given spreads, the test set's term
    normal with a known variance."""
    first = rng.normal(0.0, spreads[0], size=(draws, seeds))
    second = rng.normal(0.0, spreads[1], size=(draws, seeds))
    delta = second.mean(axis=1) - first.mean(axis=1) + rng.normal(0.0, math.sqrt(test_variance), size=draws)
    terms = first.var(axis=1, ddof=1) / seeds, second.var(axis=1, ddof=1) / seeds
    variance = terms[0] + terms[1] + test_variance
    tail = SENTENCES - 1
    per_term = variance ** 2 / (terms[0] ** 2 / (seeds - 1) + terms[1] ** 2 / (seeds - 1) + test_variance ** 2 / tail)
    together = variance ** 2 / ((terms[0] + terms[1]) ** 2 / (seeds - 1) + test_variance ** 2 / tail)
    statistic = np.abs(delta) / np.sqrt(variance)
    return {name: float(np.mean(2 * stats.t.sf(statistic, df) < ALPHA))
            for name, df in (("per_term", per_term), ("together", together))}


def binomial_interval(rate: float, count: int) -> str:
    """The rate with its Wilson 95% interval, as the table prints it."""
    z = 1.96
    centre = (rate + z * z / (2 * count)) / (1 + z * z / count)
    half = z * math.sqrt(rate * (1 - rate) / count + z * z / (4 * count * count)) / (1 + z * z / count)
    return f"{100 * rate:.1f}% [{100 * (centre - half):.1f}, {100 * (centre + half):.1f}]"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--simulations", type=int, default=1000, help="pairs per cell (default 1000)")
    parser.add_argument("--seed-sd", type=float, default=0.7,
                        help="the seeds' standard deviation of BLEU (default 0.7; the frontier study measured 0.1 "
                             "to 1.4)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--law-data-sets", type=int, default=100, help="data sets for the laws' table (default 100)")
    args = parser.parse_args()
    started = time.time()
    probe = Simulator(0.0, args.seed)
    simulator = Simulator(seed_sd_logit_for(probe, args.seed_sd), args.seed)
    counts = bootstrap_counts(SENTENCES)
    shifts = {delta: quality_for(simulator, delta, QUALITY) for delta in DELTAS}
    true_score = expected_score(simulator, QUALITY, 4000)
    true_network = expected_score(simulator, QUALITY, 4000, seed_sd=0.0)
    cells = len(SEEDS) + (len(SEEDS) - 1) * len(DELTAS) + 1
    bar = tqdm(total=cells * args.simulations, desc="simulated pairs", unit="pair", file=sys.stderr)
    results = {}
    for seeds in SEEDS:
        results[(seeds, 0.0)] = cell(simulator, counts, seeds, 0.0, args.simulations, true_score, bar=bar)
        for delta in DELTAS if seeds > 1 else ():
            results[(seeds, delta)] = cell(simulator, counts, seeds, shifts[delta], args.simulations, true_score,
                                           bar=bar)
    # One seed: the question it can answer, two fixed networks of equal expected score.
    networks = cell(simulator, counts, 1, 0.0, args.simulations, true_network, seed_sd=0.0, bar=bar)
    bar.close()
    measured = results[(3, 0.0)]

    print(f"Simulated pairs per cell: {args.simulations}; test sets of {SENTENCES} sentences drawn from "
          f"{POPULATION:,}; {BOOTSTRAP_SAMPLES} bootstrap resamples; baseline about {true_score:.1f} BLEU; seeds' "
          f"standard deviation {args.seed_sd} BLEU; a 3-seed delta's standard error: the test set's (paired "
          f"bootstrap) {measured['bootstrap_error']:.2f} BLEU, the t test's (seeds and test set) "
          f"{measured['standard_error']:.2f}. {platform.processor() or platform.machine()}, "
          f"{time.time() - started:.0f} s.")
    print()
    print("| seeds a side | false positives, t test (target 3-7%) | false positives, bootstrap p alone "
          "(test set only) | coverage of the delta's 95% interval | coverage of a system's 95% interval | "
          + " | ".join(f"power at {delta:g} BLEU" for delta in DELTAS)
          + " | detected with 80% power | the same, first of a Holm family of 6 |")
    print("|---:|---|---|---|---|" + "---:|" * len(DELTAS) + "---:|---:|")
    for seeds in SEEDS:
        null = results[(seeds, 0.0)]
        label = f"{seeds}" + (" (recipes: untestable)" if seeds == 1 else "")
        # With one seed the test is not one of the recipes: its power and detectable
        # difference would be a claim it cannot make.
        power = (["-"] * len(DELTAS) if seeds == 1 else
                 [f"{100 * results[(seeds, delta)]['rejected']:.0f}%" for delta in DELTAS])
        detected = ["-", "-"] if seeds == 1 else [f"{null['detectable']:.2f}", f"{null['detectable_holm']:.2f}"]
        print(f"| {label} | {binomial_interval(null['rejected'], args.simulations)} | "
              f"{binomial_interval(null['bootstrap_rejected'], args.simulations)} | "
              f"{binomial_interval(null['delta_coverage'], args.simulations)} | "
              f"{binomial_interval(null['score_coverage'], args.simulations)} | "
              + " | ".join(power) + f" | {' | '.join(detected)} |")
    print(f"| 1 (trained networks) | {binomial_interval(networks['rejected'], args.simulations)} | "
          f"{binomial_interval(networks['bootstrap_rejected'], args.simulations)} | "
          f"{binomial_interval(networks['delta_coverage'], args.simulations)} | "
          f"{binomial_interval(networks['score_coverage'], args.simulations)} | "
          + " | ".join("-" for _ in DELTAS) + f" | {networks['detectable']:.2f} | {networks['detectable_holm']:.2f} |")
    print()
    print(f"Rates with their Wilson 95% intervals. Power: the t test's rejection rate at alpha {ALPHA} when the "
          "recipes differ by that much expected BLEU. Detected with 80% power: (t(0.975, df) + t(0.8, df)) x the "
          "mean standard error at the median df, in BLEU; with Holm over 6 comparisons the smallest p is held "
          f"to {ALPHA}/6. '1 (recipes)': one seed a side while the recipes' seeds vary, which no one-seed test can "
          "answer; '1 (trained networks)': two fixed networks, no seed offset, the question a one-seed test "
          "answers.")
    rng, draws = np.random.default_rng(args.seed), 40000
    print()
    print("| seeds a side | seeds' spreads | test set's variance / seeds' | false positives, each seed term its own "
          "K - 1 | false positives, both at min(K) - 1 (the report's) |")
    print("|---:|---|---:|---:|---:|")
    for seeds in (2, 3, 5):
        for spreads in ((0.7, 0.7), (0.2, 1.4)):
            seed_terms = (spreads[0] ** 2 + spreads[1] ** 2) / seeds
            for ratio in (0.0, 0.1, 0.3, 1.0):
                rates = degrees_of_freedom_rules(seeds, ratio * seed_terms, spreads, draws, rng)
                print(f"| {seeds} | {spreads[0]} / {spreads[1]} | {ratio:g} | {100 * rates['per_term']:.1f}% | "
                      f"{100 * rates['together']:.1f}% |")
    print()
    print(f"Normal seed scores, {draws:,} pairs a row (a rate's 95% interval is about ±0.2 points at 5%).")
    laws = law_coverage(args.law_data_sets, 200, args.seed)
    print()
    print("| law | budgets x seeds | noise | data sets | coverage of alpha's 95% interval | median width |")
    print("|---|---|---:|---:|---|---:|")
    print(f"| loss = 1.8 + 4e6 x C^-0.5 | 7 x 3 | 1% | {args.law_data_sets} | "
          f"{binomial_interval(laws['coverage'], args.law_data_sets)} | {laws['width']:.3f} |")


if __name__ == "__main__":
    main()
