"""Each family's envelope and the laws that predict it, as the report states them.

A family's envelope is, at each budget, the size (configured model) with the lowest mean
validation loss over its seeds. At each budget that size's seeds are the points a law is
fitted through (``scaling_laws``): validation loss with the saturating law and the plain
power law, and beam BLEU the same two ways, its ceiling at most 100. Each law comes with
its leave-one-budget-out error against two baselines (a straight line in log compute and
the nearest other budget's measurement) and is said to predict only if it beats both;
intervals on its parameters come from the seeds resampled within budgets, and a
parameter the fit left on its bound is "not determined", with no interval. Where a
loss's floor E is at its bound 0 the saturating law is the power law, and no choice
between them is made.
Crossovers of two families' loss laws are stated only inside both measured ranges, with
an interval only where the draws determine it (``DETERMINED`` of them cross there).

The envelope is also checked against the grid it was chosen from: a best size that is
the smallest or largest size tried at its budget is flagged (``edge``), since the
optimum may lie beyond it.

Records (``FamilyLaws``, ``LawCrossover``): report.json holds them as ``comparison.laws``
and ``comparison.law_crossovers``; each law's fit is the JSON object ``_laws`` makes.
"""

from __future__ import annotations

from stages.report import scaling_laws
from stages.report.scaling_laws import BEYOND, MIN_BUDGETS
from stages.report.comparison_records import EnvelopePoint, FamilyLaws, GroupSummary, LawCrossover

# A crossover's interval is printed only where this share of the draws cross inside
# both measured ranges; with fewer, where they cross is not determined.
DETERMINED = 0.95

# What is fitted: (name, the summary's field, the value rises to a ceiling, the bound).
METRICS = (("valid_loss", "valid_loss", False, 0.0), ("bleu", "bleu", True, 100.0))


def envelope(groups: list[GroupSummary], family: str) -> list[GroupSummary]:
    """The family's best size at each budget (lowest mean validation loss), by budget."""
    best: dict[float, tuple[float, GroupSummary]] = {}  # budget -> (loss, group)
    for group in groups:
        loss = group.valid_loss.mean
        if group.family != family or not group.budget or loss is None:
            continue
        if group.budget not in best or loss < best[group.budget][0]:
            best[group.budget] = (loss, group)
    return [best[budget][1] for budget in sorted(best)]


def grid_edge(groups: list[GroupSummary], chosen: GroupSummary) -> str | None:
    """"smallest" or "largest" when ``chosen`` is the smallest or largest size (by
    parameters) its family tried at its budget, with more than one size tried; else None."""
    sizes = sorted({group.parameters for group in groups if group.family == chosen.family
                    and group.budget == chosen.budget and group.valid_loss.mean is not None
                    and group.parameters is not None})
    if len(sizes) < 2 or chosen.parameters is None:
        return None
    if chosen.parameters == sizes[0]:
        return "smallest"
    return "largest" if chosen.parameters == sizes[-1] else None


def family_laws(groups: list[GroupSummary], draws: int = scaling_laws.BOOTSTRAP_DRAWS) -> list[FamilyLaws]:
    """Per family with at least ``MIN_BUDGETS`` budgets on its envelope: the envelope and
    each metric's laws (see the module docstring)."""
    found = []
    for family in dict.fromkeys(group.family for group in groups):
        points = envelope(groups, family)
        if len(points) < MIN_BUDGETS:
            continue
        laws = {}
        for name, field, rising, bound in METRICS:
            flops, values = _points(points, field)
            if len(set(flops)) >= MIN_BUDGETS:
                laws[name] = _laws(flops, values, rising, bound, draws)
        found.append(FamilyLaws(
            family=family,
            envelope=[_envelope_point(point, grid_edge(groups, point)) for point in points],
            measured_from=points[0].train_flops, measured_to=points[-1].train_flops,
            valid_loss=laws.get("valid_loss"), bleu=laws.get("bleu")))
    return found


def _envelope_point(point: GroupSummary, edge: str | None) -> EnvelopePoint:
    # ``envelope`` keeps only groups with a budget and a validation loss.
    assert point.budget is not None and point.valid_loss.mean is not None
    return EnvelopePoint(budget=point.budget, model=point.model, preset=point.preset, parameters=point.parameters,
                         train_flops=point.train_flops, valid_loss=point.valid_loss.mean, bleu=point.bleu.mean,
                         edge=edge)


def _points(points: list[GroupSummary], field: str) -> tuple[list[float], list[float]]:
    """Every seed's value at each budget, at the seeds' mean FLOPs (seeds stop within
    an update of each other)."""
    flops, values = [], []
    for point in points:
        for value in getattr(point, field).each:
            flops.append(point.train_flops)
            values.append(value)
    return flops, values


def _laws(flops: list[float], values: list[float], rising: bool, bound: float, draws: int) -> dict:
    saturating = {"rising": rising, "bound": bound}
    power = {"rising": rising, "saturating": False}
    result: dict[str, dict] = {}
    for name, options in (("saturating", saturating), ("power", power)):
        try:
            law = scaling_laws.fit(flops, values, **options)
            left_out = scaling_laws.leave_one_budget_out(flops, values, **options)
        except ValueError as error:  # a power law through a BLEU of 0
            result[name] = {"error": str(error)}
            continue
        sampled = scaling_laws.bootstrap(flops, values, draws=draws, **options)
        at_bound = name == "saturating" and law.at_bound
        result[name] = {
            "E": law.E, "A": law.A, "alpha": law.alpha, "E_at_bound": at_bound,
            # No interval for what the fit did not determine, nor without seeds to draw.
            "interval": {key: (scaling_laws.interval([getattr(draw, key) for draw in sampled])
                               if sampled and not (key == "E" and at_bound) else None)
                         for key in ("E", "A", "alpha")},
            "draws": len(sampled),
            "draws_at_bound": sum(draw.at_bound for draw in sampled) if name == "saturating" else 0,
            "leave_one_out": {"budgets": left_out.budgets, "measured": left_out.measured,
                              "predicted": left_out.predicted, "line": left_out.line, "naive": left_out.naive,
                              "mean_absolute_error": left_out.mean_absolute_error,
                              "line_mean_absolute_error": left_out.line_mean_absolute_error,
                              "naive_mean_absolute_error": left_out.naive_mean_absolute_error},
            "predicts": left_out.predicts,
        }
    if "error" not in result["power"] and "error" not in result["saturating"]:
        # A loss's floor on its bound 0 makes the saturating law the power law itself:
        # there is nothing to choose. (BLEU's ceiling at 100 is not the power law's 0.)
        if result["saturating"]["E_at_bound"] and not rising and abs(result["saturating"]["E"]) <= 1e-9 + 1e-3 * abs(
                min(values)):
            result["power"]["choice"] = "same law: E at its bound"
        else:
            better = (result["power"]["leave_one_out"]["mean_absolute_error"]
                      <= result["saturating"]["leave_one_out"]["mean_absolute_error"])
            result["power"]["choice"] = "kept" if better else "dropped"
    return result


def law_of(entry: FamilyLaws, metric: str = "valid_loss", kind: str = "saturating") -> scaling_laws.Law | None:
    """A family's fitted law back from its record (``metric``: valid_loss or bleu)."""
    fitted = (getattr(entry, metric) or {}).get(kind)
    if not fitted or "error" in fitted:
        return None
    rising = metric == "bleu"
    return scaling_laws.Law(fitted["E"], fitted["A"], fitted["alpha"], -1 if rising and kind == "saturating" else 1,
                            entry.measured_from, entry.measured_to, len(entry.envelope))


def crossovers(entries: list[FamilyLaws], groups: list[GroupSummary],
               draws: int = scaling_laws.BOOTSTRAP_DRAWS) -> list[LawCrossover]:
    """Every pair of families with saturating loss laws: where they cross inside both
    measured ranges (else ``BEYOND``), the share of the seed-resampling draws that cross
    there, and the 95% interval of those crossings where at least ``DETERMINED`` of the
    draws do (else None: not determined)."""
    found = []
    # Each family's draws once, from a seed of its own: the pairs' draws are independent.
    sampled = {entry.family: _draws(entry, groups, draws, seed=1000 + index) for index, entry in enumerate(entries)
               if law_of(entry) is not None}
    for index, first in enumerate(entries):
        for second in entries[index + 1:]:
            a, b = law_of(first), law_of(second)
            if a is None or b is None:
                continue
            at = scaling_laws.crossover(a, b)
            samples = [scaling_laws.crossover(x, y) for x, y in zip(sampled[first.family], sampled[second.family])]
            crossing = [sample for sample in samples if sample is not None]
            share = len(crossing) / len(samples) if samples else 0.0
            bounds = scaling_laws.interval(crossing) if share >= DETERMINED else None
            found.append(LawCrossover(
                families=[first.family, second.family], flops=at if at is not None else BEYOND,
                interval=list(bounds) if bounds else None,
                share_of_draws=share, draws=len(samples)))
    return found


def _draws(entry: FamilyLaws, groups: list[GroupSummary], draws: int, seed: int) -> list[scaling_laws.Law]:
    flops, values = _points(envelope(groups, entry.family), "valid_loss")
    return scaling_laws.bootstrap(flops, values, draws=draws, seed=seed, bound=0.0)
