"""IsoFLOP profiles (Hoffmann et al. 2022, "Training compute-optimal large language
models", approach 2): at each budget, a family's sizes trained to the same counted FLOPs,
a parabola fitted to validation loss against log parameters, its minimum the
compute-optimal size at that budget; then N_opt = k x C^a fitted across the budgets whose
minimum lies inside the sizes tried, and the same for the optimum counted in all parameters
and for the tokens D_opt seen at it.

Sizes are counted in **non-embedding parameters** (Kaplan et al. 2020, section 2.1): the
token and position tables are looked up, not multiplied, and grow with the vocabulary
rather than with the model; a tied output projection counts with them, though it costs
FLOPs, so the all-parameters figure is given beside it. The tokens at the
optimum (target tokens, as the train stage counts them) are read off the runs
themselves: log tokens interpolated linearly in log parameters between the sizes tried
at that budget.

A minimum counts as **interior** only if the parabola opens upward, its minimum lies
strictly between the smallest and largest size tried, and the size with the lowest mean
loss is neither of them. Otherwise the profile is flagged with where the optimum lies and
the frontier preset to add (``widths.FRONTIER_WIDTHS``); flagged budgets stay out of the
exponent. A size whose run diverged (``seeds.diverged``), or that does not translate
(``gate.py``), is left out of its profile and
named.

Intervals come from a parametric bootstrap of the measurement noise: each size's mean loss
redrawn with the seeds' standard deviation (pooled over that budget's sizes with two or
more seeds, else over the family's, else the parabola's residuals where four or more sizes
leave some), every parabola refitted and the exponent refitted through the redrawn optima.
That standard deviation is itself estimated, from few degrees of freedom: plugged in as
if known, the 95% intervals held the truth in only 80-92% of simulated studies. So each
draw takes its own standard deviation, sd x sqrt(df / chi2(df)) (the spread a sample of
df degrees of freedom leaves for the true one), which widens the intervals most where the
noise was measured least. With one seed per size and three sizes, nothing measures the
noise and no interval is given.

A draw whose parabola puts the minimum outside the sizes tried (or has none) is not
dropped: dropping it would keep only the draws that agree with the sizes chosen and
narrow the interval. It counts as lying beyond the sizes on its side (the side whose end
the parabola is lower at), at minus or plus infinity, and the intervals are percentiles
of all draws. So a bound is finite only where at most 2.5% of the draws left the sizes
on its side; otherwise that bound is open (the size to add says which way; null in
``report.json``). The
exponent's draws follow: a budget's optimum beyond the sizes sends the slope to plus or
minus infinity, and two such budgets pulling opposite ways leave it undetermined, which
counts against both bounds.

Each exponent is given in the three conventions the literature compares: N_opt in
non-embedding parameters (Kaplan et al.) and in all parameters (Hoffmann et al.), and the
optimum as FLOPs per token, M = C / D_opt, in which C = M x D holds exactly, so that its
exponent and D_opt's add up to 1 (Porian et al. 2024 and Pearce and Song 2024 trace
much of the disagreement between published exponents to such conventions at small
scale). With three or more budgets, a **lack-of-fit test** asks whether one straight line
in log-log fits the optima within their own spreads (``lack_of_fit``); where it rejects,
the report gives the slopes between successive budgets and no single exponent.

Dicts, made records by ``comparison.py`` (``IsoflopFamily``): report.json holds them as ``comparison.isoflop``.
"""

from __future__ import annotations

import math
import re
from typing import Any

import numpy as np
from scipy import stats

from stages.report.comparison_records import GroupSummary, IsoflopFamily
from stages.shared import gate
from stages.shared.models.widths import FRONTIER_WIDTHS

MIN_SIZES = 3  # a parabola through fewer has no residual and, with two, no curvature
MIN_BUDGETS = 2  # interior optima an exponent is fitted through
DRAWS = 2000
LEVEL = 0.95
# Hoffmann et al. (2022), table 2, approach 2: N_opt proportional to C^0.49 and D_opt to C^0.51.
HOFFMANN_A, HOFFMANN_B = 0.49, 0.51


def fit_parabola(x: np.ndarray, y: np.ndarray) -> tuple[float, float, float]:
    """Least squares y = c2 x^2 + c1 x + c0."""
    c2, c1, c0 = np.polyfit(np.asarray(x, float), np.asarray(y, float), 2)
    return float(c2), float(c1), float(c0)


def minimum(coefficients: tuple[float, float, float]) -> float | None:
    """Where the parabola is lowest; None if it does not open upward."""
    c2, c1, _ = coefficients
    return -c1 / (2 * c2) if c2 > 0 else None


def locate(sizes: np.ndarray, means: np.ndarray, x_min: float | None) -> str | None:
    """None for an interior minimum; else where the optimum lies: "below the smallest
    size", "above the largest size" or "no minimum" (the profile does not curve up)."""
    best = int(np.argmin(means))
    if x_min is None:
        return "no minimum"
    if best == 0 or x_min <= sizes[0]:
        return "below the smallest size"
    if best == len(sizes) - 1 or x_min >= sizes[-1]:
        return "above the largest size"
    return None


def size_to_add(preset: str | None, where: str) -> str | None:
    """The frontier preset one step beyond ``preset`` (``w16`` below: ``w12``), or None."""
    match = re.fullmatch(r"w(\d+)", preset or "")
    if not match or int(match.group(1)) not in FRONTIER_WIDTHS:
        return None
    index = FRONTIER_WIDTHS.index(int(match.group(1))) + (-1 if where.startswith("below") else 1)
    return f"w{FRONTIER_WIDTHS[index]}" if 0 <= index < len(FRONTIER_WIDTHS) else None


def profiles(groups: list[GroupSummary], draws: int = DRAWS, seed: int = 0) -> list[IsoflopFamily]:
    """Per family with sizes at two or more budgets: each budget's profile, and the
    exponents of N_opt and D_opt where enough minima are interior (module docstring).
    ``groups``: the report's summaries of each model at each budget."""
    found = []
    for family in dict.fromkeys(group.family for group in groups):
        members = [g for g in groups if g.family == family and g.budget and g.valid_loss.mean is not None
                   and g.non_embedding_parameters]
        budgets = sorted({g.budget for g in members if g.budget is not None})
        if len(budgets) < MIN_BUDGETS or max(_count_sizes(members, b) for b in budgets) < MIN_SIZES:
            continue
        found.append(_family(family, members, budgets, draws, seed))
    return found


def _count_sizes(members: list[GroupSummary], budget: float) -> int:
    return len({g.non_embedding_parameters for g in members if g.budget == budget})


def _size(group: GroupSummary) -> int:
    """A member's non-embedding parameters: ``profiles`` keeps only groups that count them."""
    assert group.non_embedding_parameters is not None
    return group.non_embedding_parameters


def _family(family: str, members: list[GroupSummary], budgets: list[float], draws: int, seed: int) -> IsoflopFamily:
    rng = np.random.default_rng(seed)
    family_sd = _pooled_sd([g for g in members if gate.ranked(g.translates)])
    entries, draws_of = [], {}
    for budget in budgets:
        at = sorted((g for g in members if g.budget == budget), key=_size)
        # A size whose run diverged is not a point on the profile: its loss measures the
        # divergence, not the size. Left out and named.
        diverged = [g.model for g in at if g.diverged_seeds]
        # Nor is a size that does not translate (gate.py): its loss is the target side's
        # language model, not a translation model's.
        untranslated = [g.model for g in at if not gate.ranked(g.translates) and not g.diverged_seeds]
        entry, optima = _profile(budget, [g for g in at if not g.diverged_seeds and g.model not in untranslated],
                                 family_sd, draws, rng)
        entry["diverged"], entry["not_translating"] = diverged, untranslated
        entries.append(entry)
        if optima is not None:
            draws_of[budget] = optima
    _add_flops_per_token(entries, draws_of)
    return IsoflopFamily(family=family, count="non_embedding", profiles=entries,
                         parameters=_exponent(entries, draws_of, "parameters", HOFFMANN_A),
                         total_parameters=_exponent(entries, draws_of, "total_parameters", HOFFMANN_A),
                         flops_per_token=_exponent(entries, draws_of, "flops_per_token", HOFFMANN_A),
                         tokens=_exponent(entries, draws_of, "tokens", HOFFMANN_B))


def _add_flops_per_token(entries: list[dict], draws_of: dict) -> None:
    """The optimum counted as FLOPs per token, M = C / D_opt: the size convention in
    which C = M x D holds exactly, so that its exponent and the tokens' add up to 1
    (in parameters they need not: C is not 6 N D for these models, and embeddings are
    left out of N). Read off the tokens at the optimum, and so are its draws."""
    for entry in entries:
        tokens = (entry["optimum"] or {}).get("tokens")
        if tokens is None:
            continue
        log_c = math.log10(entry["budget"])
        entry["optimum"]["flops_per_token"] = entry["budget"] / tokens
        if "tokens_interval" in entry["optimum"]:
            entry["optimum"]["flops_per_token_interval"] = sorted(entry["budget"] / t
                                                                  for t in entry["optimum"]["tokens_interval"])
        drawn = draws_of.get(entry["budget"], {}).get("tokens")
        if drawn is not None:
            draws_of[entry["budget"]]["flops_per_token"] = log_c - drawn  # +-inf tokens: -+inf FLOPs per token


def _profile(budget: float, at: list[GroupSummary], family_sd: tuple[float | None, int], draws: int,
             rng: np.random.Generator) -> tuple[dict, dict | None]:
    x = np.log10([_size(g) for g in at])
    means = np.array([g.valid_loss.mean for g in at])
    # What the optimum is read off as besides non-embedding parameters, each interpolated
    # in log-log between the sizes tried: all parameters (Hoffmann et al.'s count) and tokens.
    read_off = {field: np.log10([getattr(g, source) for g in at]) for field, source in
                (("total_parameters", "parameters"), ("tokens", "train_tokens")) if all(getattr(g, source) for g in at)}
    entry: dict[str, Any] = {"budget": budget,
             "sizes": [{"model": g.model, "preset": g.preset, "parameters": g.parameters,
                        "non_embedding_parameters": g.non_embedding_parameters,
                        "train_tokens": g.train_tokens, "valid_loss": g.valid_loss.mean,
                        "seeds": len(g.valid_loss.each)} for g in at],
             "optimum": None, "where": None, "add": None, "noise": None}
    if len(at) < MIN_SIZES:
        entry["where"] = f"{len(at)} sizes tried: a parabola needs {MIN_SIZES}"
        return entry, None
    # Every seed's loss is a point: a size with more seeds weighs more.
    xs = np.concatenate([[xi] * len(g.valid_loss.each) for xi, g in zip(x, at)])
    ys = np.concatenate([g.valid_loss.each for g in at])
    coefficients = fit_parabola(xs, ys)
    x_min = minimum(coefficients)
    entry["coefficients"] = list(coefficients)
    entry["where"] = locate(x, means, x_min)
    if entry["where"] is not None or x_min is None:  # locate says "no minimum" for None
        edge = at[0] if entry["where"].startswith("below") else at[-1]
        entry["add"] = size_to_add(edge.preset, entry["where"]) if entry["where"] != "no minimum" else None
        return entry, None
    entry["optimum"] = {"parameters": 10 ** x_min,
                        **{field: 10 ** float(np.interp(x_min, x, values)) for field, values in read_off.items()}}
    (sd, df), source = _noise(at, family_sd, xs, ys, coefficients)
    entry["noise"] = {"sd": sd, "df": df, "source": source}
    if sd is None:
        return entry, None
    optima = redrawn_optima(x, means, np.array([len(g.valid_loss.each) for g in at]), sd, draws, rng, df)
    # The shares of the draws whose minimum lies below and above the sizes tried.
    entry["optimum"]["beyond"] = [float(np.mean(optima == -np.inf)), float(np.mean(optima == np.inf))]
    bounds = censored_interval(optima)
    if np.isfinite(bounds).all():
        entry["optimum"]["interval"] = [float(10 ** v) for v in bounds]
        for field, values in read_off.items():  # tokens fall as the size grows: sorted
            entry["optimum"][f"{field}_interval"] = sorted(float(10 ** np.interp(v, x, values)) for v in bounds)
    else:  # the size that would close the interval: one step past the side the draws left most
        below, above = entry["optimum"]["beyond"]
        entry["add"] = size_to_add(at[0 if below >= above else -1].preset, "below" if below >= above else "above")
    return entry, {"parameters": optima, **{field: _read_off(optima, x, values) for field, values in read_off.items()}}


def _read_off(optima: np.ndarray, x: np.ndarray, values: np.ndarray) -> np.ndarray:
    """Each draw's optimum read off as another count (log10), interpolated between the
    sizes; a draw beyond the sizes stays beyond, on the side that count lies
    (tokens fall as the size grows)."""
    finite = np.isfinite(optima)
    read = np.interp(np.where(finite, optima, x[0]), x, values)
    beyond = np.where(np.sign(optima) * np.sign(values[-1] - values[0]) > 0, np.inf, -np.inf)
    return np.where(finite, read, beyond)


def censored_interval(draws: np.ndarray, level: float = LEVEL) -> np.ndarray:
    """The central ``level`` percentile interval of ``draws``, where -inf and +inf are
    draws beyond the measured range on that side and NaN an undetermined draw, counted
    beyond on both: a bound is infinite where more than (1 - level) / 2 of the draws lie
    past it."""
    tail = (1 - level) / 2
    low = np.quantile(np.where(np.isnan(draws), -np.inf, draws), tail, method="inverted_cdf")
    high = np.quantile(np.where(np.isnan(draws), np.inf, draws), 1 - tail, method="inverted_cdf")
    return np.array([low, high], dtype=float)


def redrawn_optima(x: np.ndarray, means: np.ndarray, seeds: np.ndarray, sd: float, draws: int,
                   rng: np.random.Generator, df: int | None = None) -> np.ndarray:
    """The parabola's minimum (log10 parameters) for each of ``draws`` redrawings of the
    sizes' mean losses (each with sd / sqrt(its seeds)); -inf or +inf where a draw's
    minimum is not between the smallest and largest size: the side it lies on, or for a
    parabola that does not open upward, the side whose end it is lower at. With ``df``,
    the degrees of freedom ``sd`` was estimated with, each draw first redraws the
    standard deviation itself."""
    spread = np.full((draws, 1), sd) if df is None else sd * np.sqrt(df / rng.chisquare(df, size=(draws, 1)))
    redrawn = means + rng.normal(size=(draws, len(means))) * spread / np.sqrt(seeds)
    # Each draw's parabola through the sizes' means, weighted by their seeds: the point
    # fit through every seed's loss is the same least-squares problem.
    c2, c1, _ = np.polyfit(x, redrawn.T, 2, w=np.sqrt(seeds))
    lower_at_smallest = c2 * x[0] ** 2 + c1 * x[0] < c2 * x[-1] ** 2 + c1 * x[-1]
    with np.errstate(divide="ignore", invalid="ignore"):
        optima = np.where(c2 > 0, -c1 / (2 * c2), np.where(lower_at_smallest, -np.inf, np.inf))
    optima[optima <= x[0]] = -np.inf
    optima[optima >= x[-1]] = np.inf
    return optima


def _pooled_sd(groups: list[GroupSummary]) -> tuple[float | None, int]:
    """The seeds' standard deviation pooled over the groups with two or more seeds, and
    its degrees of freedom."""
    squares, df = 0.0, 0
    for group in groups:
        each = group.valid_loss.each
        if len(each) > 1:
            squares += float(np.var(each, ddof=1)) * (len(each) - 1)
            df += len(each) - 1
    return (math.sqrt(squares / df) if df else None), df


def _noise(at: list[GroupSummary], family_sd: tuple[float | None, int], xs, ys,
           coefficients) -> tuple[tuple[float | None, int], str | None]:
    """The noise of one seed's final loss, its degrees of freedom, and where it came from."""
    if (pooled := _pooled_sd(at))[0] is not None:
        return pooled, "seeds at this budget"
    if family_sd[0] is not None:
        return family_sd, "seeds at the family's other budgets"
    if len(at) > MIN_SIZES:
        residuals = ys - np.polyval(coefficients, xs)
        df = len(ys) - 3
        return (float(math.sqrt(np.sum(residuals ** 2) / df)), df), "residuals of the parabola"
    return (None, 0), None


def _exponent(entries: list[dict], draws_of: dict, what: str, reference: float) -> dict:
    """log10(optimum) = a log10(C) + k through the interior budgets; the interval from
    the draws (each budget's redrawn optimum; ``draw_slopes`` for draws beyond the sizes)."""
    interior = [e for e in entries if e["optimum"] and e["optimum"].get(what)]
    result: dict[str, Any] = {"budgets": [e["budget"] for e in interior], "exponent": None, "interval": None,
              "reference": reference}
    if len(interior) < MIN_BUDGETS:
        return result
    log_c = np.log10([e["budget"] for e in interior])
    log_opt = np.log10([e["optimum"][what] for e in interior])
    slope, intercept = np.polyfit(log_c, log_opt, 1)
    result.update(exponent=float(slope), coefficient=float(10 ** intercept),
                  segments=[float(v) for v in np.diff(log_opt) / np.diff(log_c)], lack_of_fit=None)
    if all(draws_of.get(e["budget"], {}).get(what) is not None for e in interior):
        drawn = np.stack([draws_of[e["budget"]][what] for e in interior], axis=1)
        slopes = draw_slopes(log_c, drawn)
        # An infinite bound is an open side: null, as JSON has no infinity.
        result["interval"] = [float(bound) if np.isfinite(bound) else None for bound in censored_interval(slopes)]
        result["lack_of_fit"] = lack_of_fit(log_c, log_opt, drawn)
    return result


def lack_of_fit(log_c: np.ndarray, log_opt: np.ndarray, drawn: np.ndarray, level: float = LEVEL) -> dict | None:
    """Whether a straight line in log-log fits the budgets' optima within their own
    spreads: chi-squared of the weighted line's residuals, each budget's standard error
    read off its draws (half the distance between their 16th and 84th percentiles, so
    that draws beyond the sizes count without an infinite variance), on budgets - 2
    degrees of freedom. None where it cannot be tested: two budgets (no degree of
    freedom left), or a budget whose draws left the sizes more than 16% of the time
    on a side (no finite spread). ``rejects``: p below 1 - ``level``; then no single
    exponent describes the optima, and the slopes between successive budgets do."""
    if len(log_c) < 3:
        return None
    low, high = np.quantile(drawn, [stats.norm.cdf(-1), stats.norm.cdf(1)], axis=0, method="inverted_cdf")
    errors = (high - low) / 2
    if not np.isfinite(errors).all() or (errors <= 0).any():
        return None
    weights = 1 / errors ** 2
    slope, intercept = np.polyfit(log_c, log_opt, 1, w=np.sqrt(weights))
    chi2 = float(np.sum(weights * (log_opt - (slope * log_c + intercept)) ** 2))
    df = len(log_c) - 2
    p = float(stats.chi2.sf(chi2, df))
    return {"chi2": chi2, "df": df, "p": p, "rejects": p < 1 - level,
            "standard_errors": [float(error) for error in errors]}


def draw_slopes(log_c: np.ndarray, optima: np.ndarray) -> np.ndarray:
    """The least-squares slope of each row of ``optima`` (draws x budgets) against
    ``log_c``. A row with a budget beyond the sizes (+-inf) has an infinite slope: its
    sign is where that budget pulls the line (an optimum beyond the top at the highest
    budget steepens it); budgets pulling opposite ways leave it NaN, undetermined."""
    finite = np.isfinite(optima).all(axis=1)
    slopes = np.full(len(optima), np.nan)
    if finite.any():
        slopes[finite] = np.polyfit(log_c, optima[finite].T, 1)[0]
    # The slope's derivative in budget i's optimum has the sign of log_c[i] - mean(log_c).
    pull = np.sign(np.where(np.isfinite(optima), 0.0, optima)) * np.sign(log_c - log_c.mean())
    up, down = (pull > 0).any(axis=1), (pull < 0).any(axis=1)
    slopes[~finite & up & ~down] = np.inf
    slopes[~finite & down & ~up] = -np.inf
    return slopes
