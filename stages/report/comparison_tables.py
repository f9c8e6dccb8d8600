"""The comparison's tables (``comparison.compare``), as titled DataFrames of display
strings that the Markdown and HTML reports render the same way."""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd

from stages.report.resampling import BOOTSTRAP_SAMPLES, RANDOMIZATION_TRIALS
from stages.report.scaling_laws import BEYOND
from stages.report.significance import ALPHA


@dataclass(frozen=True)
class Section:
    title: str
    table: pd.DataFrame
    note: str
    text_columns: int = 1  # the leading columns that hold text (left-aligned)


def sections(comparison: dict) -> list[Section]:
    """The sections that have something to say: seeds only when a model has several,
    tests only with two models at a budget, the frontier only with a fitted law."""
    found = []
    if any(len(group["seeds"]) > 1 for group in comparison["groups"]):
        found.append(_seeds(comparison))
    if comparison["intervals"]:
        found.append(_intervals(comparison))
    if comparison["tests"]:
        found.append(_tests(comparison))
    if comparison["frontier"]:
        found.append(_frontier(comparison))
    if comparison.get("laws"):
        found += [_envelope(comparison), _laws(comparison)]
    if comparison.get("tuning"):
        found.append(_tuning(comparison))
    return found


def _tuning(comparison: dict) -> Section:
    """Each tuned model size's chosen rate, and the best validation loss of every rate
    its tune stage tried (lr_sensitivity.png draws them)."""
    rows = []
    for entry in comparison["tuning"]:
        for trial in entry["trials"]:
            loss = trial["best_valid_loss"]
            rows.append({"model": entry["model"], "learning rate": f"{trial['lr']:g}",
                         "best valid loss": "no finite loss" if loss is None else f"{loss:.4g}",
                         "validations": str(trial["validations"]),
                         "ASHA": "stopped" if trial["stopped_early"] else "ran to the budget",
                         "chosen": "yes" if trial["lr"] == entry["lr"] else ""})
    budgets = sorted({entry["budget"] for entry in comparison["tuning"]})
    return Section("Tuned learning rates", pd.DataFrame(rows),
                   "Each model size's peak learning rate, chosen by its tune stage (Ray Tune: a grid, ASHA stopping "
                   f"the weak trials) as the rate whose trial reached the lowest validation loss, each trial trained "
                   f"as the train stage trains, to {', '.join(f'{b:.3g}' for b in budgets)} counted FLOPs; its "
                   "train runs used it.", text_columns=2)


def _mean_std(summary: dict) -> str:
    if summary["mean"] is None:
        return "-"
    return f"{summary['mean']:.2f}" + (f" ± {summary['std']:.2f}" if summary["std"] is not None else "")


def short_of_budget(group: dict) -> str | None:
    """Which of the group's runs stopped before its FLOPs budget, and where; None when
    every run spent it."""
    short = group.get("short_of_budget") or []
    if not short:
        return None
    runs = "; ".join(f"seed {run['seed']} stopped by {run['stop_reason']} after {run['train_flops']:.3g} FLOPs "
                     f"({run['train_flops'] / group['budget']:.0%})" for run in short)
    return f"{group['label']} fell short of its budget of {group['budget']:.2g} FLOPs: {runs}"


def _seeds(comparison: dict) -> Section:
    rows = [[group["label"], ", ".join(map(str, group["seeds"])), _mean_std(group["bleu"]),
             " / ".join(f"{value:.2f}" for value in group["bleu"]["each"]), _mean_std(group["chrf"])]
            for group in comparison["groups"]]
    table = pd.DataFrame(rows, columns=["model", "seeds", "BLEU mean ± sd", "BLEU per seed", "chrF mean ± sd"])
    shortfalls = [said + "." for group in comparison["groups"] if (said := short_of_budget(group))]
    return Section("Seeds", table, " ".join(["Sample standard deviation over the seeds; each seed is its own "
                                             "artifact.", *shortfalls]))


def _intervals(comparison: dict) -> Section:
    rows = [[label] + [f"{interval['score']:.2f} ± {interval['ci']:.2f}" for interval in metrics.values()]
            for label, metrics in comparison["intervals"].items()]
    names = list(next(iter(comparison["intervals"].values())))
    table = pd.DataFrame(rows, columns=["model", *names])
    return Section("95% confidence intervals", table,
                   "Score (the mean of the seeds' corpus scores) ± half-width of the 95% bootstrap interval "
                   f"({BOOTSTRAP_SAMPLES} resamples of the test sentences; a drawn sentence brings every seed's "
                   "output of it). With one seed the interval measures the test set's variation only.")


def _agreement(estimate: dict) -> str:
    bound = {"at most": "≤", "at least": "≥", None: ""}[estimate["bound"]]
    return f"{bound}{estimate['percent']:.0f}%"


def _p(value: float | None) -> str:
    return "-" if value is None else f"{value:.4f}"


def verdict(test: dict) -> str:
    """What one row of the tests says, in the words the report uses everywhere."""
    if test["significant"]:
        return "significant" if test["seeds"] > 1 else "significant on this test set (1 seed)"
    if test["seeds"] > 1 and test["p_sentences_holm"] < ALPHA:
        return "not significant across seeds"
    return "not significant"


def findings(comparison: dict) -> list[str]:
    """One sentence per pair on BLEU, written from the pair's own numbers and verdict:
    the report's only prose about which model is better."""
    sentences = []
    groups = {group["label"]: group for group in comparison.get("groups", [])}
    for test in comparison["tests"]:
        if test["metric"] != "BLEU":
            continue
        # The delta is b - a; the sentence says how far the one ahead leads, with that
        # lead's interval (the delta's, turned round where a is ahead).
        sign = 1 if test["delta"] > 0 else -1
        ahead, behind = (test["b"], test["a"]) if sign > 0 else (test["a"], test["b"])
        low, high = sorted((sign * test["delta_low"], sign * test["delta_high"]))
        interval = f"[{low:+.2f}, {high:+.2f}]" if low <= 0 <= high else f"[{low:.2f}, {high:.2f}]"
        said = f"{ahead} scored {abs(test['delta']):.2f} BLEU above {behind} {interval}: "
        if test["significant"]:
            said += ("significant" if test["seeds"] > 1 else
                     "beyond the test set's variation, with one seed each (seed variation not measured)")
        elif test["seeds"] > 1 and test["p_sentences_holm"] < ALPHA:
            said += (f"beyond the test set's variation (Holm p {test['p_sentences_holm']:.3f}), but not shown "
                     f"across seeds (seed test p {test['p_seeds']:.2f}; with {test['seeds']} seeds a side its "
                     f"smallest possible p is {test['p_seeds_smallest']:.2f})")
        else:
            said += f"not significant (Holm p {test['p_sentences_holm']:.3f})"
        # A pair is compared at one budget; where a run stopped short of it, the pair's
        # compute was not matched, and the sentence says so rather than the label implying it.
        shortfalls = [found for label in (test["a"], test["b"])
                      if label in groups and (found := short_of_budget(groups[label]))]
        if shortfalls:
            said += "; not at matched compute: " + "; ".join(shortfalls)
        sentences.append(said + ".")
    return sentences


def _tests(comparison: dict) -> Section:
    alpha = comparison["alpha"]
    rows = []
    for test in comparison["tests"]:
        seeds = "-" if "p_seeds" not in test else f"{test['p_seeds']:.3f} (≥ {test['p_seeds_smallest']:.3f})"
        rows.append([f"{test['b']} vs {test['a']}", test["metric"],
                     f"{test['delta']:+.2f} [{test['delta_low']:+.2f}, {test['delta_high']:+.2f}]",
                     _p(test["p_bootstrap"]), _p(test["p_randomization"]), seeds,
                     _p(test["p_sentences_holm"]), _p(test.get("p_seeds_holm")),
                     f"{_agreement(test['agreement'])} ({_agreement(test['agreement_low'])}-"
                     f"{_agreement(test['agreement_high'])})", verdict(test)])
    table = pd.DataFrame(rows, columns=["pair", "metric", "delta [95% interval]", "p bootstrap", "p randomization",
                                        "p seeds (smallest possible)", "p sentences, Holm", "p seeds, Holm",
                                        "human agreement (interval)", "verdict"])
    count = len(comparison["tests"])
    return Section("Paired significance", table,
                   " ".join(findings(comparison)) + " "
                   f"Models at the same budget, seed paired with seed. Sentence-level: paired bootstrap "
                   f"({BOOTSTRAP_SAMPLES} resamples) and stratified approximate randomization "
                   f"({RANDOMIZATION_TRIALS} trials) over test sentences, each sentence with all its seeds; "
                   "two-sided p-values, the larger of the two kept. Seed-level (two or more seeds): the exact "
                   "permutation test over the seed scores; in brackets the smallest p it can give with that many "
                   f"seeds. Holm-Bonferroni over all {count} comparisons of this report; significant: the adjusted "
                   f"sentence-level p and, with several seeds, the adjusted seed-level p below {alpha}. With one "
                   "seed, a significant difference is one the test set's variation does not explain; how much "
                   "another seed would move it was not measured. Human agreement: the estimated share of system "
                   "pairs with a delta this large whose order human judgement confirms, for the delta and, in "
                   "brackets, the ends of its interval (Kocmi et al. 2024, arXiv 2401.06760, table 1, "
                   "interpolated; chrF's row for chrF++).", text_columns=2)


def _flops(need: dict | None) -> str:
    if need is None:
        return "never"
    return BEYOND if need["extrapolated"] else f"{need['flops']:.2e}"


def _frontier(comparison: dict) -> Section:
    levels = list(comparison["frontier"][0]["flops_for_bleu"])
    rows = [[row["family"], f"{row['b']:.3f}", f"{row['a']:.3g}", f"{row['valid_from']:.2e} - {row['valid_to']:.2e}",
             str(row["points"]), f"{row['r_squared']:.3f}", *(_flops(row["flops_for_bleu"][level]) for level in levels)]
            for row in comparison["frontier"]]
    table = pd.DataFrame(rows, columns=["family", "exponent b", "a", "measured FLOPs", "points", "R²",
                                        *(f"FLOPs for BLEU {level}" for level in levels)])
    crossings = "; ".join(f"{' and '.join(c['families'])} cross at {c['flops']:.2e} FLOPs (BLEU {c['bleu']:.1f})"
                          for c in comparison["crossovers"])
    return Section("Quality against compute", table,
                   "BLEU = a x FLOPs^b, least squares on log-log through each model's mean BLEU per budget. "
                   f"Needs and crossovers are stated only inside the FLOPs measured; outside: {BEYOND}. "
                   + (crossings + "." if crossings else "The laws do not cross inside the measured FLOPs."))


def _envelope(comparison: dict) -> Section:
    rows = [[entry["family"], f"{point['budget']:.2g}", point["model"], f"{point['parameters'] / 1e6:.2f}M",
             f"{point['valid_loss']:.3f}", "-" if point["bleu"] is None else f"{point['bleu']:.2f}"]
            for entry in comparison["laws"] for point in entry["envelope"]]
    table = pd.DataFrame(rows, columns=["family", "budget", "best size", "parameters", "valid loss", "BLEU"])
    return Section("Compute-optimal size per budget", table,
                   "Each family's envelope: at each budget, its size with the lowest mean validation loss "
                   "(nats per target token, at each run's last validation: the weights it ended with) over its "
                   "seeds; BLEU is that size's mean beam BLEU.", text_columns=3)


def _interval(fitted: dict, key: str, digits: str) -> str:
    bounds = fitted["interval"][key]
    said = format(fitted[key], digits)
    return said + (f" [{format(bounds[0], digits)}, {format(bounds[1], digits)}]" if bounds else "")


def _laws(comparison: dict) -> Section:
    rows = []
    for entry in comparison["laws"]:
        for metric in ("valid_loss", "bleu"):
            for kind, fitted in entry.get(metric, {}).items():
                if "error" in fitted:
                    rows.append([entry["family"], metric, kind, "-", "-", "-", "-", fitted["error"]])
                    continue
                left_out = fitted["leave_one_out"]
                judged = ["flagged: predicts worse than the next budget" if fitted["worse_than_naive"] else "predicts"]
                if kind == "power":
                    judged.append("kept" if fitted.get("kept") else "dropped: the saturating law predicts better")
                rows.append([entry["family"], metric, kind,
                             "-" if kind == "power" else _interval(fitted, "E", ".3g"), _interval(fitted, "alpha", ".3f"),
                             f"{left_out['mean_absolute_error']:.3f}", f"{left_out['naive_mean_absolute_error']:.3f}",
                             "; ".join(judged)])
    table = pd.DataFrame(rows, columns=["family", "value", "law", "E [95%]", "alpha [95%]", "left-out error",
                                        "next-budget error", "verdict"])
    crossings = [f"{' and '.join(c['families'])}: "
                 + (f"{c['flops']:.3g} FLOPs" if not isinstance(c["flops"], str) else c["flops"])
                 + (f" (bootstrap 95%: {c['interval'][0]:.3g} to {c['interval'][1]:.3g}; "
                    f"{c['share_of_draws']:.0%} of draws cross inside the range)" if c["interval"] else "")
                 for c in comparison.get("law_crossovers", [])]
    return Section("Laws that predict", table,
                   "Fitted through every seed's value on each family's envelope: saturating, value = E + A x "
                   "FLOPs^-alpha (for BLEU, E - A x FLOPs^-alpha, E at most 100); power, value = A x FLOPs^-alpha. "
                   "Intervals: bootstrap over budgets, each drawn budget with all its seeds. Left-out error: mean "
                   "absolute error predicting each budget from a fit without it; next-budget error: that of taking "
                   "the nearest other budget's measurement instead. The power law is kept only where its left-out "
                   "error is at most the saturating law's. "
                   + ("Validation-loss laws cross, inside both measured ranges only: " + "; ".join(crossings) + "."
                      if crossings else ""), text_columns=3)
