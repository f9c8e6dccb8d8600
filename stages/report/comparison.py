"""What the report says about the comparison beyond one row per run: each configured
model's seeds taken together, confidence intervals and paired tests between models
trained at the same budget (``significance.py``), verdicts on a declared family of
primary comparisons (``primary.py``), and, with enough budgets, each family's envelope
and the laws that predict it (``compute_laws.py``) and, with enough sizes, its IsoFLOP
profiles and how the compute-optimal size grows with compute (``isoflop.py``).

Everything here is plain data (JSON-ready): ``report.json`` holds it as ``comparison``,
and the tables and the figures are drawn from it.
"""

from __future__ import annotations

from itertools import combinations

from stages.report import compute_laws, gate, isoflop, resampling, significance
from stages.report.primary import primary_pairs
from stages.report.seeds import ModelAtBudget, group_runs


def compare(records: list[dict], outputs: dict[str, tuple[list[str], list[str]]],
            primary_comparisons: list[list[str]] = ()) -> dict:
    """``outputs``: run name -> (hypotheses, references) of its evaluation; runs without
    one are summarized but left out of intervals and tests. ``primary_comparisons``:
    pairs of configured models to give verdicts on (``primary``); by default each
    family's best size against each other family's."""
    groups = group_runs(records)
    several_budgets = len({group.budget for group in groups}) > 1
    labels = {id(group): _label(group, several_budgets) for group in groups}
    summaries = [{"label": labels[id(group)], **group.summary()} for group in groups]

    evaluated = {}  # label -> (budget, its seeds' statistics), for groups whose every run was evaluated
    for group in groups:
        if all(run["name"] in outputs for run in group.runs):
            evaluated[labels[id(group)]] = (group.budget, _system(labels[id(group)], group, outputs))
    # Only models that translate are compared (gate.py): one that does not is shown, with
    # its interval, and withheld from every test, verdict, profile and law.
    translating = [row for row in summaries if row["translates"] != gate.DOES_NOT]
    withheld = [{"label": row["label"], "budget": row["budget"], "why": row["not_translating"]}
                for row in summaries if row["translates"] == gate.DOES_NOT]
    unchecked = [row["label"] for row in summaries if row["translates"] == gate.NOT_CHECKED]
    compared = {row["label"] for row in translating}
    systems = {label: entry for label, entry in evaluated.items() if label in compared}
    draws: dict[int, object] = {}  # test-set size -> the bootstrap's draws, shared by the systems of that size

    def counts(system: resampling.SeededSystem):
        sentences = system.statistics["BLEU"].shape[1]
        if sentences not in draws:
            draws[sentences] = resampling.bootstrap_counts(sentences)
        return draws[sentences]

    intervals = {label: significance.confidence_intervals(system, counts(system))
                 for label, (_, system) in evaluated.items()}
    # The primary family is chosen from the validation split before any test runs.
    primary, primary_said = primary_pairs([row for row in summaries if row["label"] in systems],
                                          [list(pair) for pair in primary_comparisons])
    tests = []
    for budget in dict.fromkeys(budget for budget, _ in systems.values()):
        at_budget = [system for b, system in systems.values() if b == budget]
        pairs = []
        for first, second in combinations(at_budget, 2):
            if (second.name, first.name) in primary:  # a primary pair in the order it was declared
                first, second = second, first
            role = significance.PRIMARY if (first.name, second.name) in primary else significance.EXPLORATORY
            pairs.append((first, second, role))
        # Primary rows first, in the order they were declared.
        pairs.sort(key=lambda pair: primary.index((pair[0].name, pair[1].name)) if pair[2] == significance.PRIMARY
                   else len(primary))
        tests += significance.paired_tests(pairs, counts(at_budget[0]))
    tests = significance.adjust(tests)

    family_laws = compute_laws.family_laws(translating)
    # Seeds whose outputs were another seed's, line for line: counted once (resampling.seeded_system).
    repeated = {label: system.repeated for label, (_, system) in evaluated.items() if system.repeated}
    return {"groups": summaries, "intervals": intervals, "tests": tests, "primary": primary_said,
            "withheld": withheld, "unchecked": unchecked, "repeated_seeds": repeated,
            "alpha": significance.ALPHA, "agreement": significance.AGREEMENT,
            "laws": family_laws, "law_crossovers": compute_laws.crossovers(family_laws, translating),
            "isoflop": isoflop.profiles(summaries)}


def _label(group: ModelAtBudget, several_budgets: bool) -> str:
    return f"{group.model} @ {group.budget:.2g}".replace("e+", "e") if several_budgets and group.budget else group.model


def _system(label: str, group: ModelAtBudget, outputs: dict) -> resampling.SeededSystem:
    """The group's seeds, each with its own output on the shared test set."""
    return resampling.seeded_system(label, [run.get("seed") for run in group.runs],
                                    [outputs[run["name"]] for run in group.runs], significance.metrics())
