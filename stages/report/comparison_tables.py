"""The comparison's tables (``comparison.compare``), as titled DataFrames of display
strings that the Markdown and HTML reports render the same way."""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd

from stages.report.significance import BOOTSTRAP_SAMPLES, RANDOMIZATION_TRIALS


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
    return found


def _mean_std(summary: dict) -> str:
    if summary["mean"] is None:
        return "-"
    return f"{summary['mean']:.2f}" + (f" ± {summary['std']:.2f}" if summary["std"] is not None else "")


def _seeds(comparison: dict) -> Section:
    rows = [[group["label"], ", ".join(map(str, group["seeds"])), _mean_std(group["bleu"]),
             " / ".join(f"{value:.2f}" for value in group["bleu"]["each"]), _mean_std(group["chrf"])]
            for group in comparison["groups"]]
    table = pd.DataFrame(rows, columns=["model", "seeds", "BLEU mean ± sd", "BLEU per seed", "chrF mean ± sd"])
    return Section("Seeds", table, "Sample standard deviation over the seeds; each seed is its own artifact.")


def _intervals(comparison: dict) -> Section:
    rows = [[label] + [f"{interval['score']:.2f} ± {interval['ci']:.2f}" for interval in metrics.values()]
            for label, metrics in comparison["intervals"].items()]
    names = list(next(iter(comparison["intervals"].values())))
    table = pd.DataFrame(rows, columns=["model", *names])
    return Section("95% confidence intervals", table,
                   f"Score ± half-width of sacreBLEU's bootstrap interval ({BOOTSTRAP_SAMPLES} resamples). "
                   "With several seeds, every seed's output is scored together, paired with the references "
                   "repeated per seed.")


def _tests(comparison: dict) -> Section:
    alpha, practical = comparison["alpha"], comparison["practical_delta"]
    rows = []
    for test in comparison["tests"]:
        if not test["significant"]:
            verdict = "not significant"
        elif test["practical"]:
            verdict = "significant *"
        else:
            verdict = f"significant, below {practical[test['metric']]} †"
        rows.append([f"{test['b']} vs {test['a']}", test["metric"], f"{test['delta']:+.2f}",
                     f"{test['p_bootstrap']:.4f}", f"{test['p_randomization']:.4f}", verdict])
    table = pd.DataFrame(rows, columns=["pair", "metric", "delta", "p (paired bootstrap)",
                                        "p (approx. randomization)", "verdict"])
    return Section("Paired significance", table,
                   f"sacreBLEU's paired bootstrap resampling ({BOOTSTRAP_SAMPLES} resamples) and approximate "
                   f"randomization ({RANDOMIZATION_TRIALS} trials), models at the same budget. Significant: both "
                   f"p < {alpha}. *: the delta is at least the one at which the metric agrees with human "
                   "rankings 80% of the time (Kocmi et al. 2024, arXiv 2401.06760, table 1: "
                   + ", ".join(f"{metric} {delta}" for metric, delta in practical.items())
                   + "); †: significant but smaller than that.", text_columns=2)


def _flops(need: dict | None) -> str:
    if need is None:
        return "never"
    return ("~" if need["extrapolated"] else "") + f"{need['flops']:.2e}"


def _frontier(comparison: dict) -> Section:
    levels = list(comparison["frontier"][0]["flops_for_bleu"])
    rows = [[row["family"], f"{row['b']:.3f}", f"{row['a']:.3g}", f"{row['valid_from']:.2e} - {row['valid_to']:.2e}",
             str(row["points"]), f"{row['r_squared']:.3f}", *(_flops(row["flops_for_bleu"][level]) for level in levels)]
            for row in comparison["frontier"]]
    table = pd.DataFrame(rows, columns=["family", "exponent b", "a", "measured FLOPs", "points", "R²",
                                        *(f"FLOPs for BLEU {level}" for level in levels)])
    crossings = "; ".join(f"{' and '.join(c['families'])} cross at {c['flops']:.2e} FLOPs (BLEU {c['bleu']:.1f}"
                          + (")" if c["measured"] else ", outside the measured range)")
                          for c in comparison["crossovers"])
    return Section("Quality against compute", table,
                   "BLEU = a x FLOPs^b, least squares on log-log through each model's mean BLEU per budget. "
                   "~: extrapolated beyond the measured FLOPs. "
                   + (crossings + "." if crossings else "The laws do not cross near the measured FLOPs."))
