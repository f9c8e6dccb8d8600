"""Each family's frontier and the laws that predict it, as the report states them.

A family's frontier is its envelope: at each budget, the size (configured model) with
the lowest mean validation loss over its seeds. At each budget that size's seeds are
the points a law is fitted through (``scaling_laws``): validation loss with the
saturating law and the plain power law, and beam BLEU the same two ways, its ceiling at
most 100. Each law comes with its leave-one-budget-out errors, against the naive
prediction of the nearest other budget's measurement, and bootstrap intervals on its
parameters; the power law is kept only where it predicts its left-out budgets as well
as the saturating law. Crossovers of two families' loss laws are stated only inside
both measured ranges, with the share of bootstrap draws that cross there.

Plain data (JSON-ready): ``report.json`` holds it as ``comparison["laws"]``.
"""

from __future__ import annotations

from stages.report import scaling_laws
from stages.report.scaling_laws import BEYOND, MIN_BUDGETS

# What is fitted: (name, the summary's field, the value rises to a ceiling, the bound).
METRICS = (("valid_loss", "valid_loss", False, 0.0), ("bleu", "bleu", True, 100.0))


def envelope(groups: list[dict], family: str) -> list[dict]:
    """The family's best size at each budget (lowest mean validation loss), by budget."""
    best: dict[float, dict] = {}
    for group in groups:
        loss = group["valid_loss"]["mean"]
        if group["family"] != family or not group["budget"] or loss is None:
            continue
        if group["budget"] not in best or loss < best[group["budget"]]["valid_loss"]["mean"]:
            best[group["budget"]] = group
    return [best[budget] for budget in sorted(best)]


def family_laws(groups: list[dict], draws: int = scaling_laws.BOOTSTRAP_DRAWS) -> list[dict]:
    """Per family with at least ``MIN_BUDGETS`` budgets on its envelope: the envelope and
    each metric's laws (see the module docstring)."""
    found = []
    for family in dict.fromkeys(group["family"] for group in groups):
        points = envelope(groups, family)
        if len(points) < MIN_BUDGETS:
            continue
        entry = {"family": family,
                 "envelope": [{"budget": p["budget"], "model": p["model"], "preset": p["preset"],
                               "parameters": p["parameters"], "train_flops": p["train_flops"],
                               "valid_loss": p["valid_loss"]["mean"], "bleu": p["bleu"]["mean"]} for p in points],
                 "measured_from": points[0]["train_flops"], "measured_to": points[-1]["train_flops"]}
        for name, field, rising, bound in METRICS:
            flops, values = _points(points, field)
            if len(set(flops)) >= MIN_BUDGETS:
                entry[name] = _laws(flops, values, rising, bound, draws)
        found.append(entry)
    return found


def _points(points: list[dict], field: str) -> tuple[list[float], list[float]]:
    """Every seed's value at each budget, at the seeds' mean FLOPs (seeds stop within
    an update of each other)."""
    flops, values = [], []
    for point in points:
        for value in point[field]["each"]:
            flops.append(point["train_flops"])
            values.append(value)
    return flops, values


def _laws(flops: list[float], values: list[float], rising: bool, bound: float, draws: int) -> dict:
    saturating = {"rising": rising, "bound": bound}
    power = {"rising": rising, "saturating": False}
    result = {}
    for name, options in (("saturating", saturating), ("power", power)):
        try:
            law = scaling_laws.fit(flops, values, **options)
            left_out = scaling_laws.leave_one_budget_out(flops, values, **options)
        except ValueError as error:  # a power law through a BLEU of 0
            result[name] = {"error": str(error)}
            continue
        sampled = scaling_laws.bootstrap(flops, values, draws=draws, **options)
        result[name] = {
            "E": law.E, "A": law.A, "alpha": law.alpha,
            "interval": {key: scaling_laws.interval([getattr(draw, key) for draw in sampled])
                         for key in ("E", "A", "alpha")},
            "draws": len(sampled),
            "leave_one_out": {"budgets": left_out.budgets, "measured": left_out.measured,
                              "predicted": left_out.predicted, "naive": left_out.naive,
                              "mean_absolute_error": left_out.mean_absolute_error,
                              "naive_mean_absolute_error": left_out.naive_mean_absolute_error},
            "worse_than_naive": left_out.worse_than_naive,
        }
    if "error" not in result["power"] and "error" not in result["saturating"]:
        result["power"]["kept"] = (result["power"]["leave_one_out"]["mean_absolute_error"]
                                   <= result["saturating"]["leave_one_out"]["mean_absolute_error"])
    return result


def law_of(entry: dict, metric: str = "valid_loss", kind: str = "saturating") -> scaling_laws.Law | None:
    """A family's fitted law back from the report's data."""
    fitted = entry.get(metric, {}).get(kind)
    if not fitted or "error" in fitted:
        return None
    rising = metric == "bleu"
    return scaling_laws.Law(fitted["E"], fitted["A"], fitted["alpha"], -1 if rising and kind == "saturating" else 1,
                            entry["measured_from"], entry["measured_to"], len(entry["envelope"]))


def crossovers(entries: list[dict], groups: list[dict], draws: int = scaling_laws.BOOTSTRAP_DRAWS) -> list[dict]:
    """Every pair of families whose saturating loss laws cross inside both measured
    ranges, with the 95% interval of the bootstrap draws' crossovers and the share of
    draws that cross there; pairs that do not cross there are listed as ``BEYOND``."""
    found = []
    # Each family's draws once, from a seed of its own: the pairs' draws are independent.
    sampled = {entry["family"]: _draws(entry, groups, draws, seed=1000 + index) for index, entry in enumerate(entries)
               if law_of(entry) is not None}
    for index, first in enumerate(entries):
        for second in entries[index + 1:]:
            a, b = law_of(first), law_of(second)
            if a is None or b is None:
                continue
            at = scaling_laws.crossover(a, b)
            samples = [scaling_laws.crossover(x, y) for x, y in zip(sampled[first["family"]],
                                                                    sampled[second["family"]])]
            crossing = [sample for sample in samples if sample is not None]
            found.append({"families": [first["family"], second["family"]],
                          "flops": at if at is not None else BEYOND,
                          "interval": scaling_laws.interval(crossing) if crossing else None,
                          "share_of_draws": len(crossing) / len(samples) if samples else 0.0})
    return found


def _draws(entry: dict, groups: list[dict], draws: int, seed: int) -> list[scaling_laws.Law]:
    flops, values = _points(envelope(groups, entry["family"]), "valid_loss")
    return scaling_laws.bootstrap(flops, values, draws=draws, seed=seed, bound=0.0)
