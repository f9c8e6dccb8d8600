"""The comparison's tables (``comparison.compare``), as titled DataFrames of display
strings that the Markdown and HTML reports render the same way."""

from __future__ import annotations

from dataclasses import dataclass
from typing import cast

import pandas as pd

from stages.report import isoflop
from stages.shared import gate
from stages.report.comparison_records import (Agreement, Baselines, Comparison, EnvelopePoint, GroupSummary,
                                              IsoflopFamily, PairedTest, Spread, TunedModel, Withheld)
from stages.report.ngram_baselines import NAMES
from stages.report.compute_laws import DETERMINED
from stages.report.resampling import BOOTSTRAP_SAMPLES, RANDOMIZATION_TRIALS
from stages.report.significance import POWER, PRIMARY, SEEDS_AGREED, VERDICT_SEEDS, seeds_agreed, shown_p, verdict
from stages.select.artifact import CandidateScore, SelectionChoice
from stages.tune.artifact import grid_edge


@dataclass(frozen=True)
class Section:
    title: str
    table: pd.DataFrame
    note: str
    text_columns: int = 1  # the leading columns that hold text (left-aligned)


def sections(comparison: Comparison) -> list[Section]:
    """report.md's sections after the answer, each only when it has something to say:
    whether each model translates, the selection's choices, seeds only when a model has
    several, tests only with two models at a budget, laws only with enough budgets."""
    found = [_translation_check(comparison)] if comparison.groups else []
    found += [_selection(comparison.selection)] if comparison.selection else []
    if comparison.baselines:
        found.append(_baselines(comparison.baselines))
    if any(len(group.seeds) > 1 for group in comparison.groups):
        found.append(_seeds(comparison))
    if any(test.role == PRIMARY for test in comparison.tests):
        found.append(_primary(comparison))
    if comparison.isoflop:
        found += [_isoflop_profiles(comparison), _isoflop_exponents(comparison)]
    if comparison.laws:
        found += [_envelope(comparison), _laws(comparison)]
    if comparison.tuning:
        found.append(_tuning(comparison.tuning))
    if comparison.unpaired:
        found.append(Section("Pairs not compared", pd.DataFrame({"why": comparison.unpaired}),
                             "A paired test compares two systems sentence by sentence, so it needs both scored on "
                             "the same references (their sha256 is compared, not only their number): these pairs "
                             "were not tested, and nothing is said of which is better.", text_columns=1))
    return found


def appendix(comparison: Comparison) -> list[Section]:
    """The long tables, for a reader checking a detail (appendix.md): every selection
    candidate, each model's interval on every metric, the secondary and exploratory
    comparisons."""
    found = [_candidates(comparison.selection)] if comparison.selection else []
    if comparison.intervals:
        found.append(_intervals(comparison))
    if any(test.role != PRIMARY for test in comparison.tests):
        found.append(_other_tests(comparison))
    return found


def answer(comparison: Comparison) -> Section | None:
    """What a reader came for, first: at each budget the models ranked by mean test BLEU,
    each with its interval and its difference to the one ranked next below, with the
    verdict of that pair's test; a model that does not translate is listed, not ranked.
    None with one model per budget and nothing withheld."""
    tests = {(test.a, test.b): test for test in comparison.tests if test.metric == "BLEU"}
    rows = []
    for budget in sorted({group.budget for group in comparison.groups}, key=lambda b: (b is None, b or 0)):
        at = [group for group in comparison.groups if group.budget == budget and group.bleu.mean is not None]
        ranked = sorted((g for g in at if gate.ranked(g.translates)), key=lambda g: -cast(float, g.bleu.mean))
        for place, group in enumerate(ranked, 1):
            below = ranked[place] if place < len(ranked) else None
            test = below and (tests.get((below.label, group.label)) or tests.get((group.label, below.label)))
            rows.append([_budget(budget), str(place), group.model, _bleu_interval(comparison, group),
                         str(len(group.seeds)), _difference(test, group) if test else "-",
                         verdict(test) if test else "-"])
        for group in at:
            if not gate.ranked(group.translates):
                rows.append([_budget(budget), "-", group.model, _bleu_interval(comparison, group),
                             str(len(group.seeds)), "-", f"not ranked: {_why_not_ranked(comparison, group)}"])
    if len(rows) <= len({row[0] for row in rows}):
        return None
    table = pd.DataFrame(rows, columns=["budget", "rank", "model", "BLEU [95%]", "seeds", "lead over next [95%]",
                                        "verdict"])
    return Section("At each budget", table,
                   "Each budget's models ranked by test BLEU, the mean over their seeds, with the 95% interval of "
                   "the seeds' and the test set's variance; each difference is to the model ranked next below, with "
                   "the verdict of their primary comparison (Primary comparisons, below), or 'exploratory' where "
                   "that pair was not declared: a lead, not a finding. A model that does not translate, or is "
                   "undecided, is listed and not ranked (Does each model translate?, below).", text_columns=3)


def _why_not_ranked(comparison: Comparison, group: GroupSummary) -> str:
    """In short, what ``_withheld`` says of it."""
    entry = next((entry for entry in comparison.withheld if entry.label == group.label), None)
    if group.translates == gate.UNDECIDED:
        return "undecided"
    return "the seeds disagree" if entry and entry.seeds_translating else "does not translate"


def _budget(budget: float | None) -> str:
    return "-" if budget is None else f"{budget:.2g}".replace("e+", "e")


def _bleu_interval(comparison: Comparison, group: GroupSummary) -> str:
    band = comparison.intervals.get(group.label, {}).get("BLEU")
    if not band:
        return f"{group.bleu.mean:.2f}"
    return f"{group.bleu.mean:.2f} [{band.low:.2f}, {band.high:.2f}]"


def _difference(test: PairedTest, upper: GroupSummary) -> str:
    """The pair's difference as the upper model's lead: a test's delta is b - a."""
    sign = 1 if test.b == upper.label else -1
    low, high = sorted((sign * test.delta_low, sign * test.delta_high))
    return f"{sign * test.delta:.2f} [{low:+.2f}, {high:+.2f}]"


def _withheld(entry: Withheld) -> str:
    """Where some seeds translate and others do not, the seeds disagree about what the
    recipe makes, and a mean over both kinds of model is a verdict on neither: kept in
    the mean, a seed in three that collapsed by 6 BLEU made 14.7% of the verdicts false
    (benchmarks/statistics/verdict_calibration.py)."""
    translating = entry.seeds_translating
    if entry.translates == gate.UNDECIDED:
        return f"{entry.label}: undecided whether it translates at this budget ({entry.why})"
    if not translating:
        return f"{entry.label} did not translate at this budget ({entry.why})"
    seeds = " and ".join(str(seed) for seed in translating)
    return (f"{entry.label}: undecided, the seeds disagree at this budget (seed{'s' if len(translating) > 1 else ''} "
            f"{seeds} translate{'' if len(translating) > 1 else 's'}; {entry.why})")


def gate_sentences(comparison: Comparison) -> list[str]:
    """What the report says of the models the gate withheld, budget by budget, and of
    those it could not check: the only prose about a model that does not translate."""
    said = [_withheld(entry) + ": it is not ranked, and is in no comparison, verdict, profile or law."
            for entry in comparison.withheld]
    if comparison.unchecked:
        said.append("The translation check was not made for " + ", ".join(comparison.unchecked)
                    + " (evaluated before the evaluate stage measured source use): their comparisons are not "
                    "gated, and a model among them that does not translate would be ranked like one that does.")
    return said


def _selection(choices: list[SelectionChoice]) -> Section:
    """Each configured model's choice at each budget: the chosen candidate and the
    runner-up with their validation losses, how many candidates translated, and whether
    the choice sits at an edge of what was tried. Every candidate: ``_candidates``."""
    rows, none, at_edge = [], [], 0
    for choice in choices:
        for at in choice.budgets:
            budget = _budget(at.budget)
            scored = sorted((score for score in at.candidates
                             if gate.ranked(score.translates) and score.valid_loss is not None),
                            key=lambda score: cast(float, score.valid_loss))
            if at.size is None:
                none.append(f"{choice.model} at {budget}")
            chosen = next((score for score in scored if (score.size, score.lr) == (at.size, at.lr)), None)
            runner_up = next((score for score in scored if score is not chosen), None)
            edges = [f"{at.size_edge} size" if at.size_edge else "", f"{at.rate_edge} rate" if at.rate_edge else ""]
            at_edge += bool(at.size_edge or at.rate_edge)
            rows.append([choice.model, budget, _candidate(chosen) if chosen else "none translates",
                         _candidate(runner_up) if runner_up else "-", " and ".join(filter(None, edges)) or "no",
                         f"{len(scored)} of {len(at.candidates)}"])
    table = pd.DataFrame(rows, columns=["model", "budget", "chosen (valid loss)", "next best (valid loss)",
                                        "at an edge", "candidates translating"])
    seeds = sorted({seed for choice in choices for seed in choice.seeds})
    return Section("Selection", table,
                   f"Each model's size and peak rate at each budget, chosen on selection seed"
                   f"{'s' if len(seeds) > 1 else ''} {', '.join(map(str, seeds))}: the candidate with the lowest "
                   "final validation loss (the mean over those seeds) among those whose every selection seed "
                   "translates; the test set is not decoded for a choice. Only the chosen configuration's own "
                   "seeds are compared: the selection seeds take part in no verdict, interval or test. A choice "
                   "at an edge of the sizes or rates tried extends them, as often as select.max_extensions allows; "
                   + (f"{at_edge} of {len(rows)} choices are still at an edge of what was tried, so a better "
                      "configuration may lie beyond it. " if at_edge else "no choice sits at an edge of what was "
                                                                          "tried. ")
                   + (f"No candidate translated, so nothing was compared: {', '.join(none)}. " if none else "")
                   + "Every candidate: appendix.md.", text_columns=5)


def _candidate(score: CandidateScore) -> str:
    return f"{score.size}, {score.lr:g} ({score.valid_loss:.4f})"


def _candidates(choices: list[SelectionChoice]) -> Section:
    """Every candidate at every budget, with its loss and source use, and the one chosen."""
    rows = []
    for choice in choices:
        for at in choice.budgets:
            for score in at.candidates:
                rows.append([choice.model, _budget(at.budget), score.size, f"{score.lr:g}",
                             "-" if score.valid_loss is None else f"{score.valid_loss:.4f}",
                             " / ".join("-" if use is None else f"{use:.3f}" for use in score.source_use),
                             score.translates if gate.ranked(score.translates) else f"{score.translates}: {score.why}",
                             "chosen" if (score.size, score.lr) == (at.size, at.lr) else ""])
    table = pd.DataFrame(rows, columns=["model", "budget", "size", "peak rate", "valid loss", "source use per seed",
                                        "translates", ""])
    return Section("Selection candidates", table,
                   "Each candidate's final validation loss (the mean over the selection seeds) and each seed's "
                   "source use on the validation split (the gate's threshold and margin, as for the compared runs).",
                   text_columns=3)


def _translation_check(comparison: Comparison) -> Section:
    rows = []
    for group in comparison.groups:
        rows.append([group.label, group.translates if gate.ranked(group.translates)
                     else f"{group.translates}: " + (group.not_translating or ""),
                     " / ".join(f"{value:.3f}" for value in group.source_use.each) or "-"])
    table = pd.DataFrame(rows, columns=["model", "translates", "source use per seed (nats/token)"])
    return Section("Does each model translate?", table,
                   "Source use: the validation targets' cross-entropy with each sentence given another sentence's "
                   "source (one fixed derangement), minus the same with its own source, in nats per target token. "
                   f"A run translates when its source use is at least {gate.SOURCE_USE_MIN} and at most "
                   f"{gate.TOP_OUTPUT_MAX:.0%} of its test outputs are its most frequent output line; a run whose "
                   f"source use is within {gate.MARGIN_ERRORS:g} standard errors (over the validation sentences) of "
                   f"{gate.SOURCE_USE_MIN} is undecided, and withheld like one that does not translate; a model at "
                   "a budget translates when every seed does (docs/comparing.md). "
                   + " ".join(gate_sentences(comparison)), text_columns=2)


def _baselines(found: Baselines) -> Section:
    rows = [[NAMES.get(int(order), f"{order}-gram"), f"{loss:.3f}"] for order, loss in found.nats_per_token.items()]
    table = pd.DataFrame(rows, columns=["source-blind model", "validation loss (nats/token)"])
    return Section("Source-blind baselines", table,
                   f"{found.smoothing[:1].upper()}{found.smoothing[1:]} n-gram models of the target side alone, on the same BPE "
                   f"pieces, fitted on the {found.train_sentences:,} training targets and scored on the "
                   f"{found.valid_sentences:,} validation targets, EOS counted as the models' validation loss "
                   "counts it (stages/report/ngram_baselines.py). A model whose validation loss is above a line "
                   "predicts the target worse than that n-gram model, which never reads the source.")


def _tuning(tuned: list[TunedModel]) -> Section:
    """Each tuned model size's chosen rate, and the best validation loss of every rate
    its tune stage tried (lr_sensitivity.png draws them, a panel per family), and a
    sentence per family on whether its chosen rates are inside the rates tried."""
    rows = []
    edges: dict[str, list[tuple[TunedModel, str | None, str | None]]] = {}
    for entry in tuned:
        choice = entry.choice
        rates = sorted(trial["lr"] for trial in choice.trials)
        edge = grid_edge(choice.lr, rates)
        # tune.prefer_lower_within can choose a rate inside the grid below a best trial
        # that is still at its edge: the note names those too.
        best_edge = grid_edge(choice.best_lr, rates) if choice.best_lr != choice.lr else None
        edges.setdefault(entry.family, []).append((entry, edge, best_edge))
        for trial in choice.trials:
            loss = trial["best_valid_loss"]
            chosen = trial["lr"] == choice.lr
            rows.append({"model": entry.model, "learning rate": f"{trial['lr']:g}",
                         "best valid loss": "no finite loss" if loss is None else f"{loss:.4g}",
                         "validations": str(trial["validations"]),
                         "ASHA": "stopped" if trial["stopped_early"] else "ran to the budget",
                         "grid": "extension" if trial.get("extension") else "",
                         "chosen": ("yes, at the grid's edge" if edge else "yes") if chosen else ""})
    budgets = sorted({entry.choice.budget for entry in tuned})
    return Section("Tuned learning rates", pd.DataFrame(rows),
                   "Each model size's peak learning rate, chosen by its tune stage (Ray Tune: a grid, ASHA stopping "
                   f"the weak trials) as the rate whose trial reached the lowest validation loss, each trial trained "
                   f"as the train stage trains, to {', '.join(f'{b:.3g}' for b in budgets)} counted FLOPs; its "
                   "train runs used it. Where the best rate was at an edge of the grid, the stage tried the next "
                   "rate beyond it (grid: extension), up to tune.max_extensions times. A rate chosen at an edge of "
                   "the rates tried may be beaten by one beyond them, and a family compared at such a rate may be "
                   "compared at a worse recipe than the others: the learning rate is part of what a comparison "
                   "of families compares. " + " ".join(_tuning_sentence(family, chosen)
                                                        for family, chosen in edges.items()), text_columns=2)


def _tuning_sentence(family: str, chosen: list[tuple[TunedModel, str | None, str | None]]) -> str:
    inside = [entry.model for entry, edge, _ in chosen if edge is None]
    at_edge = [f"{entry.model} ({entry.choice.lr:g}, the {edge} tried)" for entry, edge, _ in chosen if edge]
    best_at_edge = [f"{entry.model} (best {entry.choice.best_lr:g}, the {best_edge} tried; chosen {entry.choice.lr:g})"
                    for entry, edge, best_edge in chosen if best_edge and not edge]
    if not at_edge:
        sentence = f"{family}: every chosen rate is inside the rates tried ({len(inside)} of {len(chosen)} choices)."
    else:
        sentence = (f"{family}: {len(inside)} of {len(chosen)} chosen rates inside the rates tried; at an edge: "
                    + ", ".join(at_edge) + ".")
    if best_at_edge:
        sentence += (" Inside only by tune.prefer_lower_within, the best trial's rate at an edge: "
                     + ", ".join(best_at_edge) + ".")
    return sentence


def _mean_std(summary: Spread) -> str:
    if summary.mean is None:
        return "-"
    return f"{summary.mean:.2f}" + (f" ± {summary.std:.2f}" if summary.std is not None else "")


def short_of_budget(group: GroupSummary) -> str | None:
    """Which of the group's runs stopped before its FLOPs budget, and where; None when
    every run spent it (or the group has no budget)."""
    if not group.short_of_budget or not group.budget:
        return None
    runs = "; ".join(f"seed {run.seed} stopped by {run.stop_reason} after {run.train_flops:.3g} FLOPs "
                     f"({run.train_flops / group.budget:.0%})" for run in group.short_of_budget)
    return f"{group.label} fell short of its budget of {group.budget:.2g} FLOPs: {runs}"


def _seeds(comparison: Comparison) -> Section:
    rows = [[group.label, ", ".join(map(str, group.seeds)), _mean_std(group.bleu),
             " / ".join(f"{value:.2f}" for value in group.bleu.each), _mean_std(group.chrf),
             group.translates]
            for group in comparison.groups]
    table = pd.DataFrame(rows, columns=["model", "seeds", "BLEU mean ± sd", "BLEU per seed", "chrF mean ± sd",
                                        "translates"])
    shortfalls = [said + "." for group in comparison.groups if (said := short_of_budget(group))]
    repeated = [f"{label}: seed {seed}'s outputs are seed {kept}'s, line for line, so it counts once."
                for label, seeds in comparison.repeated_seeds.items() for seed, kept in seeds.items()]
    return Section("Seeds", table, " ".join(["Sample standard deviation over the seeds; each seed is its own "
                                             "artifact.", *shortfalls, *repeated]))


def _intervals(comparison: Comparison) -> Section:
    rows = [[label] + [f"{interval.score:.2f} [{interval.low:.2f}, {interval.high:.2f}]"
                       for interval in metrics.values()] + [str(next(iter(metrics.values())).seeds)]
            for label, metrics in comparison.intervals.items()]
    translates = {group.label: group.translates for group in comparison.groups}
    for row in rows:
        row.append(translates.get(row[0], gate.NOT_CHECKED))
    names = list(next(iter(comparison.intervals.values())))
    table = pd.DataFrame(rows, columns=["model", *names, "seeds", "translates"])
    one_seed = [label for label, metrics in comparison.intervals.items()
                if not next(iter(metrics.values())).seed_variance_measured]
    return Section("95% confidence intervals", table,
                   "Score (the mean of the seeds' corpus scores) and its 95% interval: the seeds' variance over "
                   f"their number plus the test set's ({BOOTSTRAP_SAMPLES} bootstrap resamples of the test "
                   "sentences, each drawn sentence with every seed's output of it), Student's t with "
                   "Welch-Satterthwaite degrees of freedom, cut at 0 and 100. "
                   + (f"With one seed ({', '.join(one_seed)}) the interval holds the test set's variation only: "
                      "another seed could move the score beyond it. " if one_seed else ""))


def _agreement(estimate: Agreement) -> str:
    bound = {"at most": "≤", "at least": "≥", None: ""}[estimate.bound]
    return f"{bound}{estimate.percent:.0f}%"


def _lead(test: PairedTest) -> tuple[str, str, str]:
    """Who is ahead, who behind, and the lead's interval (the delta's, turned round where
    a is ahead)."""
    sign = 1 if test.delta > 0 else -1
    ahead, behind = (test.b, test.a) if sign > 0 else (test.a, test.b)
    low, high = sorted((sign * test.delta_low, sign * test.delta_high))
    interval = f"[{low:+.2f}, {high:+.2f}]" if low <= 0 <= high else f"[{low:.2f}, {high:.2f}]"
    return ahead, behind, interval


def findings(comparison: Comparison) -> list[str]:
    """One sentence per primary comparison, written from its own numbers and verdict:
    the report's only prose about which model is better."""
    sentences = []
    groups = {group.label: group for group in comparison.groups}
    for test in comparison.tests:
        if test.role != PRIMARY:
            continue
        ahead, behind, interval = _lead(test)
        seeds = "/".join(map(str, test.seeds))
        budget = groups[test.a].budget if test.a in groups else None
        at = f"At {budget:.2g} training FLOPs, ".replace("e+", "e") if budget else ""
        said = f"{at}{ahead} scored {abs(test.delta):.2f} BLEU above {behind} {interval} ({seeds} seeds): "
        if not test.seed_variance_measured:
            said += (f"{verdict(test)}, so whether the models (rather than these trained networks) differ was not "
                     f"tested; the test set's variation alone gives p {shown_p(test.p)}")
        elif test.p_holm is None:
            said += (f"{verdict(test)}: the difference and its interval, which holds the seeds' variance with "
                     f"{min(test.seeds) - 1} degree{'s' if min(test.seeds) > 2 else ''} of freedom")
        elif test.significant:
            said += f"significant (Holm p {shown_p(test.p_holm)} over {test.family_size} primary comparisons)"
        else:
            said += (f"not significant (Holm p {shown_p(test.p_holm)} over {test.family_size} primary "
                     f"comparisons); with these seeds a difference of {test.detectable:.2f} would be "
                     f"detected {POWER:.0%} of the time at p < {comparison.alpha} before adjustment, so a "
                     "smaller true difference is not excluded")
        if seeds_agreed(test):
            said += (f"; the seeds agreed (their variance {test.seed_share:.2f} of the test set's), so the "
                     f"interval assumes the recipes' seeds spread no more than these {'/'.join(map(str, test.seeds))} did")
        # A pair is compared at one budget; where a run stopped short of it, the pair's
        # compute was not matched, and the sentence says so rather than the label implying it.
        shortfalls = [found for label in (test.a, test.b)
                      if label in groups and (found := short_of_budget(groups[label]))]
        if shortfalls:
            said += "; not at matched compute: " + "; ".join(shortfalls)
        sentences.append(said + ".")
    return sentences


def _test_row(test: PairedTest) -> list[str]:
    return [f"{test.b} vs {test.a}", test.metric, "/".join(map(str, test.seeds)),
            f"{test.delta:+.2f} [{test.delta_low:+.2f}, {test.delta_high:+.2f}]",
            "∞" if test.df is None else f"{test.df:.1f}", shown_p(test.p)]


def _sentence_level(test: PairedTest) -> list[str]:
    return [f"{shown_p(test.p_bootstrap)} / {shown_p(test.p_randomization)}",
            f"{shown_p(test.p_bootstrap_sacrebleu)} / {shown_p(test.p_randomization_sacrebleu)}",
            f"{_agreement(test.agreement)} ({_agreement(test.agreement_low)}-"
            f"{_agreement(test.agreement_high)})"]


def _primary(comparison: Comparison) -> Section:
    rows = [[*_test_row(test), shown_p(test.p_holm), verdict(test), *_sentence_level(test)]
            for test in comparison.tests if test.role == PRIMARY]
    table = pd.DataFrame(rows, columns=["pair", "metric", "seeds", "delta [95% interval]", "df", "p", "p Holm",
                                        "verdict", "test set only: p bootstrap / randomization",
                                        "sacreBLEU paired-bs / paired-ar", "human agreement (interval)"])
    family = next(test.family_size for test in comparison.tests)
    return Section("Primary comparisons", table,
                   " ".join(findings(comparison)) + " " + " ".join(comparison.primary) + " "
                   "delta = b - a, each system's score the mean of its seeds'. The test: delta over its standard "
                   "error, whose variance is the seeds' (each system's sample variance over its number of seeds) "
                   "plus the test set's common to the seeds (the paired bootstrap's variance of delta, less the "
                   "seeds' own sentence noise), against Student's t with Welch-Satterthwaite degrees of freedom "
                   "(df; the seeds' terms together at the smaller side's seeds - 1); two-sided. "
                   + (f"Holm-Bonferroni over the {family} primary comparisons with {VERDICT_SEEDS} or more seeds a "
                      f"side; a verdict is given on those alone, at {comparison.alpha}. " if family else
                      f"No primary comparison has {VERDICT_SEEDS} or more seeds a side, so none gets a verdict. ")
                   + f"With fewer than {VERDICT_SEEDS} seeds a side a row gives the difference and its interval, "
                   "never a verdict: two seeds measure their variance with one degree of freedom, and two that happen "
                   "to agree leave p to the test set alone. With one seed a side the seeds' variance is not measured "
                   "at all, and p is the test set's alone. Where the seeds' term is under "
                   f"{SEEDS_AGREED:.0%} of the test set's, the row says the seeds agreed: its interval assumes the "
                   "recipes' seeds spread no more than these did. p below 0.001 is printed as < 0.001. A verdict is about the mean of seeds whose scores spread about normally: "
                   "simulated through this path with three seeds a side "
                   "(benchmarks/statistics/verdict_calibration.py), equal "
                   "recipes were called different in 2.3% to 4.3% of studies where their seeds spread alike, "
                   "collapsed alike, varied in output length or were a family's best size picked on them; in 7.3% "
                   "where one side's seeds spread 7 times the other's; and in 14.7% where one recipe alone lost a "
                   "run in three to a collapse that still translates, which three seeds do not show when they "
                   "happen not to collapse. Beside them, for comparability and "
                   f"deciding nothing: the paired bootstrap ({BOOTSTRAP_SAMPLES} resamples) and approximate "
                   f"randomization ({RANDOMIZATION_TRIALS} trials, one coin per sentence for all its seeds), "
                   "which measure the test set's variation only, and what sacreBLEU's --paired-bs and "
                   "--paired-ar print. Human agreement: the estimated share of system pairs with a delta this "
                   "large whose order human judgement confirms, for the delta and the ends of its interval "
                   "(Kocmi et al. 2024, arXiv 2401.06760, table 1, interpolated; chrF's row for chrF++).",
                   text_columns=2)


def _other_tests(comparison: Comparison) -> Section:
    rows = [[*_test_row(test), test.role, *_sentence_level(test)]
            for test in comparison.tests if test.role != PRIMARY]
    table = pd.DataFrame(rows, columns=["pair", "metric", "seeds", "delta [95% interval]", "df", "p (unadjusted)",
                                        "role", "test set only: p bootstrap / randomization",
                                        "sacreBLEU paired-bs / paired-ar", "human agreement (interval)"])
    return Section("Secondary and exploratory comparisons", table,
                   "Secondary: the primary pairs on chrF and chrF++, which restate BLEU's comparison. Exploratory: "
                   "every other pair of models at the same budget, on BLEU. The same test as the primary "
                   "comparisons, its p unadjusted for the many rows: these rows carry no verdict, and a small p "
                   "among them is a lead for a later, declared comparison, not a finding.", text_columns=2)


def _edge(point: EnvelopePoint) -> str:
    return {None: "", "smallest": "smallest size tried: the optimum may be smaller",
            "largest": "largest size tried: the optimum may be larger"}[point.edge]


def _envelope(comparison: Comparison) -> Section:
    rows = [[entry.family, f"{point.budget:.2g}", point.model,
             "-" if point.parameters is None else f"{point.parameters / 1e6:.2f}M", f"{point.valid_loss:.3f}",
             "-" if point.bleu is None else f"{point.bleu:.2f}", _edge(point)]
            for entry in comparison.laws for point in entry.envelope]
    table = pd.DataFrame(rows, columns=["family", "budget", "best size", "parameters", "valid loss", "BLEU",
                                        "grid edge"])
    edges = sum(bool(point.edge) for entry in comparison.laws for point in entry.envelope)
    cells = sum(len(entry.envelope) for entry in comparison.laws)
    return Section("Compute-optimal size per budget", table,
                   "Each family's envelope: at each budget, its size with the lowest mean validation loss "
                   "(nats per target token, at each run's last validation: the weights it ended with) over its "
                   "seeds; BLEU is that size's mean beam BLEU. "
                   + (f"In {edges} of {cells} cells the best size is the smallest or largest tried: there the "
                      "compute-optimal size was not found, only bounded on one side." if edges else ""),
                   text_columns=3)


def count(value: float) -> str:
    """A count in billions, millions or thousands (the runs' table and the profiles')."""
    for scale, suffix in ((1e9, "B"), (1e6, "M"), (1e3, "k")):
        if abs(value) >= scale:
            return f"{value / scale:.2f}{suffix}"
    return f"{value:.0f}"


def _optimum(profile: dict) -> tuple[str, str, str]:
    """Optimal non-embedding parameters and tokens, each with its interval, and where."""
    optimum = profile["optimum"]
    diverged = (f"; left out, diverged: {', '.join(profile['diverged'])}" if profile.get("diverged") else "")
    if profile.get("not_translating"):
        diverged += f"; left out, did not translate: {', '.join(profile['not_translating'])}"
    if optimum is None:
        where = profile["where"] + (f": add {profile['add']}" if profile.get("add") else "")
        return "-", "-", where + diverged
    parameters, tokens = count(optimum["parameters"]), "-"
    if optimum.get("interval"):
        parameters += f" [{count(optimum['interval'][0])}, {count(optimum['interval'][1])}]"
    if optimum.get("tokens"):
        tokens = count(optimum["tokens"])
        if optimum.get("tokens_interval"):
            tokens += f" [{count(optimum['tokens_interval'][0])}, {count(optimum['tokens_interval'][1])}]"
    where = "interior"
    if not optimum.get("interval"):
        if profile["noise"]["sd"] is None:
            where += " (no interval: nothing measures the noise)"
        else:
            below, above = optimum["beyond"]
            sides = [f"{share:.1%} of the draws {side} the sizes" for share, side in
                     ((below, "below"), (above, "above")) if share > (1 - isoflop.LEVEL) / 2]
            where += f" (no interval: {' and '.join(sides)}" + (f"; add {profile['add']})" if profile["add"] else ")")
    return parameters, tokens, where + diverged


def _isoflop_profiles(comparison: Comparison) -> Section:
    rows = []
    for entry in comparison.isoflop:
        for profile in entry.profiles:
            sizes = profile["sizes"]
            if not sizes:  # every size's run diverged or did not translate
                rows.append([entry.family, f"{profile['budget']:.2g}", "-", "-", *_optimum(profile)])
                continue
            best = min(sizes, key=lambda size: size["valid_loss"])
            rows.append([entry.family, f"{profile['budget']:.2g}",
                         f"{sizes[0]['preset']} to {sizes[-1]['preset']} ({len(sizes)})",
                         f"{best['preset']} ({best['valid_loss']:.3f})", *_optimum(profile)])
    table = pd.DataFrame(rows, columns=["family", "budget", "sizes tried", "lowest mean loss",
                                        "N_opt, non-embedding [95%]", "D_opt, target tokens [95%]", "minimum"])
    flagged = [f"{entry.family} at {profile['budget']:.2g}" for entry in comparison.isoflop
               for profile in entry.profiles if profile["optimum"] is None]
    sources = sorted({profile["noise"]["source"] for entry in comparison.isoflop for profile in entry.profiles
                      if profile.get("noise") and profile["noise"]["source"]})
    return Section("IsoFLOP profiles", table,
                   "At each budget, every size of a family trained to the same counted FLOPs; a parabola fitted "
                   "to each seed's final validation loss against log10 non-embedding parameters (Hoffmann et al. "
                   "2022, approach 2). N_opt is its minimum, counted in non-embedding parameters (token and "
                   "position tables are looked up, not multiplied; a tied output projection counts with them); D_opt is the training "
                   "target tokens at N_opt, interpolated in log-log between the sizes' runs. A minimum is interior "
                   "when the parabola opens upward, its minimum lies between the smallest and the largest size, and the "
                   "size with the lowest mean loss is neither of them. Intervals: the sizes' mean losses redrawn "
                   f"{isoflop.DRAWS} times with the seeds' spread"
                   + (f" ({'; '.join(sources)})" if sources else "") + ", that spread itself redrawn for the "
                   "few degrees of freedom it was estimated with, each parabola refitted; in simulated studies "
                   "these 95% intervals held the true optimum in 86.7% to 95.6% of cases, the true exponent in 93% "
                   "to 100% (benchmarks/statistics/isoflop_calibration.py). A draw whose minimum left the sizes "
                   "counts as lying "
                   "beyond them on its side; where more than 2.5% of the draws did so on a side, no interval is given "
                   "and the table names that side. A size whose run diverged (a final "
                   "validation loss over 1.1 times its best), or that did not translate, is left out of its "
                   "profile and named. "
                   + ("No interior minimum at: " + "; ".join(flagged) + ". These budgets stay out of the exponents."
                      if flagged else "Every budget's minimum is interior."), text_columns=3)


# What each exponent row fits, and the count it uses.
EXPONENTS = (("parameters", "N_opt ~ C^a, non-embedding parameters"),
             ("total_parameters", "N_opt ~ C^a, all parameters"),
             ("flops_per_token", "M_opt = C / D_opt ~ C^a, FLOPs per token"),
             ("tokens", "D_opt ~ C^b, target tokens"))


def _exponents_row(entry: IsoflopFamily, what: str, law: str) -> list[str]:
    fitted = getattr(entry, what)
    budgets = len(fitted["budgets"])
    if fitted["exponent"] is None:
        return [entry.family, law, "-", str(budgets), "-", "-",
                f"{budgets} interior budgets: an exponent needs {isoflop.MIN_BUDGETS}"]
    span = f"{max(fitted['budgets']) / min(fitted['budgets']):.3g}x"
    test = fitted.get("lack_of_fit")
    segments = ", ".join(f"{slope:.2f}" for slope in fitted.get("segments", []))
    if test is None:
        line = ("untested: 2 budgets leave no degree of freedom" if budgets < 3 else
                "untested: a budget's optimum has no finite spread")
    else:
        line = f"chi2 {test['chi2']:.1f} on {test['df']} df, p {test['p']:.2g}: " + (
            "rejected" if test["rejects"] else "not rejected")
    if test is not None and test["rejects"]:
        # No single exponent describes optima the line does not fit: the slopes between budgets instead.
        return [entry.family, law, f"none; between budgets {segments}", str(budgets), span, line,
                "no comparison: the line does not fit"]
    said = f"{fitted['exponent']:.2f}"
    low, high = fitted["interval"] or (None, None)
    if low is not None or high is not None:
        # None, an open side: more than 2.5% of the draws put a budget's minimum beyond the sizes there.
        said += f" [{'-∞' if low is None else f'{low:.2f}'}, {'∞' if high is None else f'{high:.2f}'}]"
    if test is None:
        against = "no comparison: the line is untested"
    elif low is None and high is None:
        against = "no interval to compare with"
    else:
        inside = (low is None or low <= fitted["reference"]) and (high is None or fitted["reference"] <= high)
        against = f"{fitted['reference']:.2f}: " + ("inside the interval" if inside else "outside the interval")
    return [entry.family, law, said, str(budgets), span, line, against]


def _isoflop_exponents(comparison: Comparison) -> Section:
    rows = [_exponents_row(entry, what, law) for entry in comparison.isoflop for what, law in EXPONENTS]
    table = pd.DataFrame(rows, columns=["family", "law", "exponent [95%]", "interior budgets", "compute span",
                                        "one straight line?", "Hoffmann et al."])
    return Section("How the compute-optimal size grows", table,
                   "A straight line through log10 of the optimum against log10 counted FLOPs, over the budgets "
                   "whose minimum is interior, in three counts of size: non-embedding parameters, all parameters, "
                   "and FLOPs per token (M = C / D_opt, in which C = M x D exactly: its exponent and D_opt's add up "
                   "to 1, where the parameters' need not). The interval from the same draws as the profiles', the "
                   "line refitted through each draw's minima. A draw where a budget's minimum left the sizes tried "
                   "counts as a slope of -∞ or +∞ (the way that budget pulls the line), so a bound shown as ∞ "
                   "means more than 2.5% of the draws went past it: the sizes do not pin the exponent down on that "
                   "side. 'One straight line?': with three or more budgets, chi-squared of the line's residuals "
                   "against each budget's own spread (from its draws); where it rejects at 0.05, no single "
                   "exponent is given, only the slopes between successive budgets. Hoffmann et al. (2022, table 2, "
                   f"approach 2) measured {isoflop.HOFFMANN_A} for N_opt and {isoflop.HOFFMANN_B} for D_opt for "
                   "decoder-only language models at 6e18 to 3e21 FLOPs, counting all parameters: a different "
                   "task, scale and count, so the last column says only whether their value lies inside this "
                   "interval, and only where the line was tested and held.", text_columns=2)


def _parameter(fitted: dict, key: str, digits: str) -> str:
    if key == "E" and fitted.get("E_at_bound"):
        return "not determined (at bound)"
    bounds = fitted["interval"][key]
    said = format(fitted[key], digits)
    return said + (f" [{format(bounds[0], digits)}, {format(bounds[1], digits)}]" if bounds else "")


def _law_verdict(fitted: dict) -> str:
    left_out = fitted["leave_one_out"]
    error = left_out["mean_absolute_error"]
    beaten_by = [name for name, baseline in (("a straight line in log compute", "line_mean_absolute_error"),
                                             ("the next budget's measurement", "naive_mean_absolute_error"))
                 if left_out[baseline] <= error]
    said = ["predicts" if fitted["predicts"] else "does not predict: no better than " + " nor ".join(beaten_by)]
    choice = fitted.get("choice")
    if choice == "kept":
        said.append("kept: predicts as well as the saturating law")
    elif choice == "dropped":
        said.append("dropped: the saturating law predicts better")
    elif choice:
        said.append("the same law as the saturating one (its E is at the bound)")
    return "; ".join(said)


def _laws(comparison: Comparison) -> Section:
    rows = []
    for entry in comparison.laws:
        for metric in ("valid_loss", "bleu"):
            for kind, fitted in (getattr(entry, metric) or {}).items():
                if "error" in fitted:
                    rows.append([entry.family, metric, kind, "-", "-", "-", "-", "-", fitted["error"]])
                    continue
                left_out = fitted["leave_one_out"]
                rows.append([entry.family, metric, kind, "-" if kind == "power" else _parameter(fitted, "E", ".3g"),
                             _parameter(fitted, "alpha", ".3f"), f"{left_out['mean_absolute_error']:.3f}",
                             f"{left_out['line_mean_absolute_error']:.3f}",
                             f"{left_out['naive_mean_absolute_error']:.3f}", _law_verdict(fitted)])
    table = pd.DataFrame(rows, columns=["family", "value", "law", "E [95%]", "alpha [95%]", "left-out error",
                                        "line error", "next-budget error", "verdict"])
    crossings = []
    for crossing in comparison.law_crossovers:
        where = crossing.flops if isinstance(crossing.flops, str) else f"{crossing.flops:.3g} FLOPs"
        if crossing.interval:
            where += f" (95% of the draws' crossings: {crossing.interval[0]:.3g} to {crossing.interval[1]:.3g})"
        elif crossing.draws:
            where += f" ({crossing.share_of_draws:.0%} of the draws cross inside the range: where is not determined)"
        crossings.append(f"{' and '.join(crossing.families)}: {where}")
    undetermined = any(fitted.get("draws") == 0 for entry in comparison.laws
                       for metric in ("valid_loss", "bleu") for fitted in (getattr(entry, metric) or {}).values()
                       if "error" not in fitted)
    return Section("Laws that predict", table,
                   "Fitted through every seed's value on each family's envelope: saturating, value = E + A x "
                   "FLOPs^-alpha (for BLEU, E - A x FLOPs^-alpha, E at most 100); power, value = A x FLOPs^-alpha. "
                   "E is searched between its bounds (a loss's floor from 0 to the lowest loss measured, BLEU's "
                   "ceiling up to 100); where the fit puts it on an edge of that range, E is not determined (and a "
                   "loss's floor at 0 makes the saturating law the power law). Intervals: the laws refitted on the "
                   "seeds resampled within each budget (a budget with one seed gets the pooled spread of the "
                   "budgets with several; budgets are never drawn, as branched budgets share one run)"
                   + ("; with one seed at every budget there are none" if undetermined else "") + ". "
                   "Left-out error: mean absolute error predicting each budget from a fit without it; line error: "
                   "that of a straight line in log FLOPs fitted to the same budgets; next-budget error: that of "
                   "taking the nearest other budget's measurement. A law predicts only if it beats both. "
                   + ("Validation-loss laws, where they cross inside both measured ranges: " + "; ".join(crossings)
                      + f". An interval is given where at least {DETERMINED:.0%} of the draws cross there."
                      if crossings else ""), text_columns=3)
