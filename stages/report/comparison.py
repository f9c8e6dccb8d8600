"""What the report says about the comparison beyond one row per run: each configured
model's seeds taken together, confidence intervals and paired tests between models
trained at the same budget (``significance.py``), verdicts on a declared family of
primary comparisons (``primary.py``), and, with enough budgets, each family's envelope
and the laws that predict it (``compute_laws.py``) and, with enough sizes, its IsoFLOP
profiles and how the compute-optimal size grows with compute (``isoflop.py``).

What it finds is a ``Comparison`` (``comparison_records.py``): ``report.json`` holds it
as ``comparison``, and the tables and the figures are drawn from it.
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import combinations

from stages.report import compute_laws, isoflop, resampling, significance
from stages.shared import gate
from stages.report.comparison_records import Baselines, Comparison, TunedModel, Withheld
from stages.report.primary import primary_pairs
from stages.report.records import RunRecord
from stages.report.seeds import ModelAtBudget, group_runs
from stages.select.artifact import SelectionChoice


def compare(records: list[RunRecord], outputs: dict[str, tuple[list[str], list[str]]],
            primary_comparisons: Sequence[Sequence[str]] = (), baselines: Baselines | None = None,
            tuning: Sequence[TunedModel] = (), selection: Sequence[SelectionChoice] = ()) -> Comparison:
    """``outputs``: run name -> (hypotheses, references) of its evaluation; runs without
    one are summarized but left out of intervals and tests. ``primary_comparisons``:
    pairs of configured models to give verdicts on (``primary``); by default each
    family's best size against each other family's. ``baselines``, ``tuning`` and
    ``selection`` are carried into the comparison as they are, for its tables."""
    systems = {label: _system(label, group, outputs) for label, group in labelled_groups(records)
               if all(run.name in outputs for run in group.runs)}
    return compare_systems(records, systems, primary_comparisons, baselines=baselines, tuning=tuning,
                           selection=selection)


def labelled_groups(records: list[RunRecord]) -> list[tuple[str, ModelAtBudget]]:
    """Each configured model at each budget with the label the report gives it: the
    model's name, and its budget where the records span several."""
    groups = group_runs(records)
    several_budgets = len({group.budget for group in groups}) > 1
    return [(_label(group, several_budgets), group) for group in groups]


def compare_systems(records: list[RunRecord], systems: dict[str, resampling.SeededSystem],
                    primary_comparisons: Sequence[Sequence[str]] = (),
                    randomization_trials: int = resampling.RANDOMIZATION_TRIALS, baselines: Baselines | None = None,
                    tuning: Sequence[TunedModel] = (), selection: Sequence[SelectionChoice] = ()) -> Comparison:
    """``compare`` from the evaluated groups' sufficient statistics (``systems``: group
    label -> its seeds' statistics, of whichever metrics they hold): the path the
    calibration benchmark drives with simulated statistics, BLEU's alone and no
    randomization test (``randomization_trials`` 0)."""
    labelled = labelled_groups(records)
    budgets = {label: group.budget for label, group in labelled}
    summaries = [group.summary(label) for label, group in labelled]
    # Only models that translate are compared (gate.py): one that does not, or is
    # undecided, is shown, with its interval, and withheld from every test, verdict,
    # profile and law.
    translating = [row for row in summaries if gate.ranked(row.translates)]
    translating_seeds = {label: [run.seed for run in group.runs if run.translates == gate.TRANSLATES]
                         for label, group in labelled}
    withheld = [Withheld(label=row.label, budget=row.budget, why=row.not_translating, translates=row.translates,
                         seeds_translating=translating_seeds[row.label])
                for row in summaries if not gate.ranked(row.translates)]
    unchecked = [row.label for row in summaries if row.translates == gate.NOT_CHECKED]
    compared = {row.label for row in translating}
    tested = {label: system for label, system in systems.items() if label in compared}
    draws: dict[int, object] = {}  # test-set size -> the bootstrap's draws, shared by the systems of that size

    def counts(system: resampling.SeededSystem):
        # Kept here too: with SACREBLEU_SEED=none each call draws anew, and every system
        # of a size must be resampled alike for the paired bootstrap (and the resamples
        # cached below) to pair.
        sentences = next(iter(system.statistics.values())).shape[1]
        if sentences not in draws:
            draws[sentences] = resampling.bootstrap_counts(sentences)
        return draws[sentences]

    resamples: dict = {}  # (system, metric) -> its seeds' scores on the resamples, for intervals and tests alike
    intervals = {label: significance.confidence_intervals(system, counts(system), resamples)
                 for label, system in systems.items()}
    # The primary family is chosen from the validation split before any test runs.
    primary, primary_said = primary_pairs([row for row in summaries if row.label in tested],
                                          [list(pair) for pair in primary_comparisons])
    tests, unpaired = [], []
    for budget in dict.fromkeys(budgets[label] for label in tested):
        at_budget = [system for label, system in tested.items() if budgets[label] == budget]
        pairs = []
        for first, second in combinations(at_budget, 2):
            # Two test sets of one size are still two test sets (nmt report across
            # configs): such a pair gets no test, and the report says why.
            reason = resampling.unpaired_reason(first, second)
            if reason:
                unpaired.append(f"{reason}: not compared")
                continue
            if (second.name, first.name) in primary:  # a primary pair in the order it was declared
                first, second = second, first
            role = significance.PRIMARY if (first.name, second.name) in primary else significance.EXPLORATORY
            pairs.append((first, second, role))
        # Primary rows first, in the order they were declared.
        pairs.sort(key=lambda pair: primary.index((pair[0].name, pair[1].name)) if pair[2] == significance.PRIMARY
                   else len(primary))
        for pair in pairs:  # each pair on the resamples of its own test set
            tests += significance.paired_tests([pair], counts(pair[0]), randomization_trials, resamples)
    tests = significance.adjust(tests)

    family_laws = compute_laws.family_laws(translating)
    # Seeds whose outputs were another seed's, line for line: counted once (resampling.seeded_system).
    repeated = {label: system.repeated for label, system in systems.items() if system.repeated}
    return Comparison(
        groups=summaries, intervals=intervals, tests=tests, primary=primary_said, withheld=withheld,
        unchecked=unchecked, repeated_seeds=repeated, alpha=significance.ALPHA, agreement=significance.AGREEMENT,
        laws=family_laws, law_crossovers=compute_laws.crossovers(family_laws, translating),
        isoflop=isoflop.profiles(summaries), baselines=baselines, tuning=list(tuning) or None,
        selection=list(selection) or None, unpaired=unpaired or None)


def _label(group: ModelAtBudget, several_budgets: bool) -> str:
    return f"{group.model} @ {group.budget:.2g}".replace("e+", "e") if several_budgets and group.budget else group.model


def _system(label: str, group: ModelAtBudget, outputs: dict) -> resampling.SeededSystem:
    """The group's seeds, each with its own output on the shared test set."""
    return resampling.seeded_system(label, [run.seed for run in group.runs],
                                    [outputs[run.name] for run in group.runs], significance.metrics())
