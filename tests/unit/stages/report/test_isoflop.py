"""IsoFLOP profiles (stages/report/isoflop.py): a parabola's minimum where it is, an
optimum outside the sizes tried flagged with the preset to add, and the exponent of
N_opt against compute recovered, within its interval, from noisy profiles with a known one."""

from __future__ import annotations

import math

import numpy as np
import pytest

from stages.report import isoflop
from stages.report.comparison import compare
from stages.report.comparison_tables import sections
from stages.report.comparison_records import GroupSummary, Spread
from stages.report.records import RunRecord
from tests.helpers import comparison_of, group_summary

WIDTHS = (8, 12, 16, 24, 32, 48, 64, 96)


def group(budget: float, width: int, losses: list[float], family: str = "transformer") -> GroupSummary:
    """A report summary of one size at one budget: non-embedding parameters 80 x width^2
    (the Transformer's), tokens from 6ND."""
    parameters = 80 * width ** 2
    return group_summary(f"{family}.w{width}", 0.0, family=family, budget=budget, preset=f"w{width}",
                         parameters=parameters + 1000 * width, non_embedding_parameters=parameters,
                         train_tokens=budget / (6 * parameters), train_flops=budget,
                         valid_loss=Spread(mean=float(np.mean(losses)), each=list(losses),
                                           std=float(np.std(losses, ddof=1)) if len(losses) > 1 else None))


def profile_groups(a: float, budgets, widths_of, noise: float = 0.0, seeds: int = 1,
                   rng=None) -> list[GroupSummary]:
    """Loss = 2 + 0.8 (log10 N - log10 N_opt(C))^2 + noise, N_opt = 3e4 (C / 1e11)^a."""
    found = []
    for budget in budgets:
        log_opt = math.log10(3e4) + a * math.log10(budget / 1e11)
        for width in widths_of(budget):
            x = math.log10(80 * width ** 2)
            mean = 2.0 + 0.8 * (x - log_opt) ** 2
            losses = [mean + noise * rng.standard_normal() if noise else mean for _ in range(seeds)]
            found.append(group(budget, width, losses))
    return found


def test_the_parabola_minimum_is_the_known_one():
    x = np.log10([1e4, 3e4, 1e5, 3e5])
    loss = 2.0 + 0.5 * (x - math.log10(5e4)) ** 2
    assert 10 ** isoflop.minimum(isoflop.fit_parabola(x, loss)) == pytest.approx(5e4, rel=1e-9)
    assert isoflop.minimum(isoflop.fit_parabola(x, -loss)) is None  # opens downward: no minimum


def test_an_interior_minimum_is_found_at_its_size_with_an_interval_from_the_seeds():
    rng = np.random.default_rng(1)
    groups = profile_groups(0.5, [1e11, 1e12], lambda budget: (12, 16, 24, 32, 48) if budget == 1e11
                            else (24, 32, 48, 64, 96), noise=0.01, seeds=3, rng=rng)
    (entry,) = isoflop.profiles(groups, draws=500)
    first = entry.profiles[0]
    assert first["where"] is None and first["add"] is None
    assert first["optimum"]["parameters"] == pytest.approx(3e4, rel=0.15)
    low, high = first["optimum"]["interval"]
    assert low < first["optimum"]["parameters"] < high and high / low < 2
    assert first["noise"]["source"] == "seeds at this budget"
    # Tokens at the optimum come from the runs: 6ND here, so C / (6 N_opt).
    assert first["optimum"]["tokens"] == pytest.approx(1e11 / (6 * first["optimum"]["parameters"]), rel=0.2)


def test_an_optimum_beyond_the_sizes_tried_is_flagged_with_the_preset_to_add():
    groups = profile_groups(0.5, [1e9, 1e11, 1e13], lambda budget: (12, 24, 48))
    (entry,) = isoflop.profiles(groups, draws=100)
    low, middle, high = entry.profiles
    # N_opt(1e11) = 3e4, about w19: inside w12-w48. N_opt(1e9) = 3e3 (w6) is below w12;
    # N_opt(1e13) = 3e5 (w61) above w48.
    assert middle["where"] is None
    assert low["where"] == "below the smallest size" and low["add"] == "w8" and low["optimum"] is None
    assert high["where"] == "above the largest size" and high["add"] == "w64" and high["optimum"] is None
    # One interior budget: no exponent.
    assert entry.parameters["exponent"] is None


def test_the_exponent_is_recovered_within_its_interval():
    rng = np.random.default_rng(7)
    budgets = [1e11, 3e11, 1e12, 3e12]

    def widths(budget):  # five sizes around each budget's optimum
        centre = math.sqrt(3e4 * (budget / 1e11) ** 0.6 / 80)
        return [w for w in WIDTHS if centre / 2.2 < w < centre * 2.2]

    groups = profile_groups(0.6, budgets, widths, noise=0.02, seeds=2, rng=rng)
    (entry,) = isoflop.profiles(groups, draws=1000)
    assert all(profile["where"] is None for profile in entry.profiles)
    fitted = entry.parameters
    low, high = fitted["interval"]
    assert low < 0.6 < high and high - low < 0.4
    assert fitted["exponent"] == pytest.approx(0.6, abs=0.1)
    # Tokens: D = C / 6N, so D_opt grows as C^(1 - a).
    assert entry.tokens["exponent"] == pytest.approx(0.4, abs=0.1)


def test_one_seed_and_three_sizes_give_an_optimum_but_no_interval():
    groups = profile_groups(0.5, [1e11, 1e12], lambda budget: (12, 24, 48) if budget == 1e11 else (24, 48, 96))
    (entry,) = isoflop.profiles(groups, draws=100)
    assert entry.profiles[0]["optimum"]["parameters"] == pytest.approx(3e4, rel=1e-6)
    assert "interval" not in entry.profiles[0]["optimum"] and entry.profiles[0]["noise"]["sd"] is None
    assert entry.parameters["exponent"] == pytest.approx(0.5, abs=1e-6) and entry.parameters["interval"] is None


def test_the_report_prints_the_profiles_and_the_exponent():
    rng = np.random.default_rng(3)
    records = []
    for g in profile_groups(0.5, [1e11, 1e12, 1e13], lambda budget: (8, 16, 32, 64, 96) if budget < 1e13
                            else (32, 48, 64, 96), noise=0.01, seeds=2, rng=rng):
        for seed, loss in enumerate(g.valid_loss.each, 1):
            records.append(RunRecord(**{"name": f"{g.model}.{g.budget:.2g}.s{seed}", "model": g.model, "seed": seed,
                            "budget": g.budget, "family": g.family, "preset": g.preset,
                            "parameters": g.parameters, "non_embedding_parameters": g.non_embedding_parameters,
                            "train_tokens": g.train_tokens, "train_flops": g.budget,
                            "stop_reason": "max_train_flops", "final_valid_loss": loss, "bleu": 20.0, "chrf": 40.0}))
    comparison = compare(records, {})
    text = "\n".join(f"{s.title}\n{s.table}\n{s.note}" for s in sections(comparison))
    assert "IsoFLOP profiles" in text and "non-embedding" in text
    # At 1e13 the optimum (3e5, about w61) is inside w32-w96; all three budgets interior.
    assert "Every budget's minimum is interior." in text
    # The exponents' table: each law's row gives its exponent with an interval, over 3 budgets.
    (grows,) = [section.table for section in sections(comparison) if section.title.startswith("How the")]
    row = grows[grows["law"] == "N_opt ~ C^a, non-embedding parameters"].iloc[0]
    assert row["exponent [95%]"].startswith("0.") and "[" in row["exponent [95%]"]
    assert row["interior budgets"] == "3"
    assert comparison.isoflop[0].parameters["exponent"] == pytest.approx(0.5, abs=0.1)


def test_a_size_whose_run_diverged_is_left_out_of_its_profile_and_named():
    """The frontier study's partial run: the RNN w16 at 3e11 ended at 6.67 nats after a
    best of 3.78, which made a parabola through it look interior."""
    from stages.report.seeds import diverged

    assert diverged(RunRecord(name="rnn.w16", final_valid_loss=6.67, best_valid_ppl=math.exp(3.78)))
    assert not diverged(RunRecord(name="rnn.w16", final_valid_loss=3.80, best_valid_ppl=math.exp(3.78)))
    groups = profile_groups(0.5, [1e11, 1e12], lambda budget: (12, 16, 24, 32))
    blown = next(g for g in groups if g.budget == 1e11 and g.preset == "w16")
    blown.valid_loss = Spread(mean=6.67, std=None, each=[6.67])
    blown.diverged_seeds = [1]
    (entry,) = isoflop.profiles(groups, draws=100)
    first = entry.profiles[0]
    assert first["diverged"] == ["transformer.w16"]
    assert [size["preset"] for size in first["sizes"]] == ["w12", "w24", "w32"]
    assert first["optimum"]["parameters"] == pytest.approx(3e4, rel=1e-6)  # the three others' parabola
    text = "\n".join(s.table.to_csv() for s in sections(comparison_of(isoflop=[entry])))
    assert "left out, diverged: transformer.w16" in text


def test_a_spread_estimated_from_few_degrees_of_freedom_widens_the_optimum_s_interval():
    """The same profile and plug-in spread: redrawing the spread for 2 degrees of freedom
    (heavy tails) spreads the redrawn optima wider than taking it as known, and for 200
    degrees of freedom hardly at all."""
    import numpy as np

    from stages.report.isoflop import redrawn_optima

    x = np.log10([1e4, 2e4, 4e4, 8e4, 1.6e5])
    means = 1.5 * (x - x[2]) ** 2 + 3.0
    seeds = np.ones(5)

    def width(df):
        optima = redrawn_optima(x, means, seeds, 0.05, 20000, np.random.default_rng(0), df)
        low, high = isoflop.censored_interval(optima)
        return high - low

    known = width(None)
    assert math.isfinite(width(2)) and width(2) > 1.3 * known
    assert width(200) == pytest.approx(known, rel=0.05)


def test_draws_beyond_the_sizes_count_on_their_side_and_open_that_bound():
    """3% of the draws at +inf (beyond the largest size) open the upper bound, 2% do not;
    an undetermined draw (NaN) counts past both bounds."""
    inside = np.linspace(0.0, 1.0, 970)
    assert isoflop.censored_interval(np.concatenate([inside, np.full(30, np.inf)]))[1] == np.inf
    low, high = isoflop.censored_interval(np.concatenate([inside, np.full(20, np.inf), np.linspace(0, 1, 10)]))
    assert 0 < low < 0.05 and 0.95 < high < 1
    assert isoflop.censored_interval(np.concatenate([inside, np.full(30, np.nan)])).tolist() == [-np.inf, np.inf]


def test_a_budget_beyond_the_sizes_pulls_the_exponent_its_way():
    """An optimum above the sizes at the highest budget steepens the line (+inf), at the
    lowest budget flattens it (-inf); the two at once leave the slope undetermined."""
    log_c = np.log10([1e11, 1e12, 1e13])
    optima = np.array([[4.0, 4.5, 5.0], [4.0, 4.5, np.inf], [np.inf, 4.5, 5.0], [np.inf, 4.5, np.inf],
                       [-np.inf, 4.5, np.inf]])
    slopes = isoflop.draw_slopes(log_c, optima)
    assert slopes[0] == pytest.approx(0.5) and slopes[1] == np.inf and slopes[2] == -np.inf
    assert np.isnan(slopes[3]) and slopes[4] == np.inf


def test_a_redrawn_parabola_without_a_minimum_lies_beyond_the_end_it_is_lower_at():
    from stages.report.isoflop import redrawn_optima

    x = np.log10([1e4, 2e4, 4e4])
    falling = np.array([3.0, 2.9, 2.7])  # opens downward, lowest at the largest size
    optima = redrawn_optima(x, falling, np.ones(3), 1e-6, 10, np.random.default_rng(0))
    assert (optima == np.inf).all()
    assert (redrawn_optima(x, falling[::-1], np.ones(3), 1e-6, 10, np.random.default_rng(0)) == -np.inf).all()


def test_a_profile_whose_draws_leave_the_sizes_names_the_side_and_the_size_to_add():
    """Seeds' noise large against the profile's curvature: the minimum is interior, but
    too many draws put it above the sizes tried for an upper bound."""
    rng = np.random.default_rng(5)
    # At 1e11: lowest at w16, w24 nearly as low (seeds' sd 0.03); at 1e12 a clear profile.
    groups = [group(1e11, width, list(mean + 0.03 * rng.standard_normal(3)))
              for width, mean in zip((8, 12, 16, 24), (2.30, 2.12, 2.05, 2.06))]
    groups += profile_groups(0.5, [1e12], lambda budget: (24, 32, 48, 64, 96), noise=0.01, seeds=3, rng=rng)
    (entry,) = isoflop.profiles(groups, draws=2000)
    first = entry.profiles[0]
    assert first["where"] is None and "interval" not in first["optimum"]
    below, above = first["optimum"]["beyond"]
    assert above > 0.025 > below
    text = "\n".join(s.table.to_csv() for s in sections(comparison_of(isoflop=[entry])))
    assert f"{above:.1%} of the draws above the sizes; add w32" in text


def test_an_open_bound_is_null_in_the_report_s_json_and_infinity_in_its_table():
    """The highest budget's draws leave the sizes above often (the profile of the test
    above): the exponent's upper bound is open. report.json holds it as null (strict
    JSON has no infinity) and the table shows it as ∞."""
    import json

    from pipeline.core.records import to_json

    rng = np.random.default_rng(5)
    groups = [group(1e11, width, list(mean + 0.03 * rng.standard_normal(3)))
              for width, mean in zip((8, 12, 16, 24), (2.30, 2.12, 2.05, 2.06))]
    groups += profile_groups(0.5, [1e10], lambda budget: (6, 8, 12, 16, 24), noise=0.01, seeds=3, rng=rng)
    (entry,) = isoflop.profiles(groups, draws=2000)
    low, high = entry.parameters["interval"]
    assert low is not None and high is None
    json.dumps(to_json(entry), allow_nan=False)  # raises on an infinity or NaN
    (grows,) = [s.table for s in sections(comparison_of(isoflop=[entry]))
                if s.title.startswith("How the")]
    row = grows[grows["law"] == "N_opt ~ C^a, non-embedding parameters"].iloc[0]
    # Two budgets leave the line untested: no comparison with a published exponent.
    assert row["exponent [95%]"].endswith(", ∞]") and row["Hoffmann et al."] == "no comparison: the line is untested"
    assert row["one straight line?"].startswith("untested: 2 budgets")


def frontier(log_optima: dict[float, float], noise: float, rng, tokens=None) -> list[dict]:
    """Five sizes a budget around each given log10 N_opt, three seeds each; tokens
    C / (6N) unless ``tokens(budget, N)`` says otherwise."""
    found = []
    for budget, log_opt in log_optima.items():
        for step in (-2, -1, 0, 1, 2):
            log_n = log_opt + 0.3 * step + 0.05
            width = math.sqrt(10 ** log_n / 80)
            losses = list(2.0 + 0.8 * (log_n - log_opt) ** 2 + noise * rng.standard_normal(3))
            entry = group(budget, 8, losses)
            n = 10 ** log_n
            entry.update(model=f"transformer.{step}", preset=f"s{step}", parameters=n + 1000 * width,
                         non_embedding_parameters=n, train_tokens=tokens(budget, n) if tokens else budget / (6 * n))
            found.append(entry)
    return found


def test_the_exponents_in_three_conventions_on_a_frontier_with_known_values():
    """N_opt = 3e4 (C / 1e11)^0.5 in non-embedding parameters; each token costs 6N plus
    2e5 FLOPs (what the embeddings and the output layer add), so FLOPs per token at the
    optimum is 6 N_opt + 2e5: its exponent is below 0.5, and with the tokens' it adds up to 1."""
    budgets = [1e11, 1e12, 1e13, 1e14]
    log_optima = {c: math.log10(3e4) + 0.5 * math.log10(c / 1e11) for c in budgets}
    groups = frontier(log_optima, 0.002, np.random.default_rng(7), tokens=lambda c, n: c / (6 * n + 2e5))
    (entry,) = isoflop.profiles(groups, draws=400)
    assert entry.parameters["exponent"] == pytest.approx(0.5, abs=0.01)
    per_token = [math.log10(6 * 10 ** log_optima[c] + 2e5) for c in budgets]
    expected = np.polyfit(np.log10(budgets), per_token, 1)[0]
    assert entry["flops_per_token"]["exponent"] == pytest.approx(expected, abs=0.02) and expected < 0.45
    assert entry["flops_per_token"]["exponent"] + entry.tokens["exponent"] == pytest.approx(1.0, abs=1e-9)
    # All parameters: N + 1000 width, which grows as N^0.5 at the small sizes: a smaller exponent.
    assert entry["total_parameters"]["exponent"] < entry.parameters["exponent"]


def test_the_line_is_rejected_through_kinked_optima_and_not_through_straight_ones():
    budgets = [1e11, 1e12, 1e13, 1e14]
    rng = np.random.default_rng(11)
    straight = {c: math.log10(3e4) + 0.5 * math.log10(c / 1e11) for c in budgets}
    (entry,) = isoflop.profiles(frontier(straight, 0.01, rng), draws=1000)
    test = entry.parameters["lack_of_fit"]
    assert test["df"] == 2 and not test["rejects"]
    # Slopes 0.9, then 0.1 and 0.1: the Transformer's measured profile was kinked like this.
    kinked = dict(zip(budgets, [4.0, 4.9, 5.0, 5.1]))
    (entry,) = isoflop.profiles(frontier(kinked, 0.01, rng), draws=1000)
    fitted = entry.parameters
    assert fitted["lack_of_fit"]["rejects"] and fitted["lack_of_fit"]["p"] < 0.001
    assert fitted["segments"] == pytest.approx([0.9, 0.1, 0.1], abs=0.05)
    (grows,) = [s.table for s in sections(comparison_of(isoflop=[entry]))
                if s.title.startswith("How the")]
    row = grows[grows["law"] == "N_opt ~ C^a, non-embedding parameters"].iloc[0]
    assert row["exponent [95%]"].startswith("none; between budgets 0.9") and "rejected" in row["one straight line?"]
    assert row["Hoffmann et al."] == "no comparison: the line does not fit"
