"""What the report says about the comparison beyond one row per run: each configured
model's seeds taken together, confidence intervals and paired significance tests between
models trained at the same budget, per family a power law of BLEU against FLOPs, and,
with enough budgets, each family's frontier and the laws that predict it
(``compute_laws.py``).

Everything here is plain data (JSON-ready): ``report.json`` holds it as ``comparison``,
and the tables and the frontier plot are drawn from it.
"""

from __future__ import annotations

from stages.report import compute_laws, frontier, resampling, significance
from stages.report.seeds import ModelAtBudget, group_runs


def compare(records: list[dict], outputs: dict[str, tuple[list[str], list[str]]]) -> dict:
    """``outputs``: run name -> (hypotheses, references) of its evaluation; runs without
    one are summarized but left out of intervals and tests."""
    groups = group_runs(records)
    several_budgets = len({group.budget for group in groups}) > 1
    labels = {id(group): _label(group, several_budgets) for group in groups}
    summaries = [{"label": labels[id(group)], **group.summary()} for group in groups]

    systems = {}  # label -> (budget, its seeds' statistics), for groups whose every run was evaluated
    for group in groups:
        if all(run["name"] in outputs for run in group.runs):
            systems[labels[id(group)]] = (group.budget, _system(labels[id(group)], group, outputs))
    draws: dict[int, object] = {}  # test-set size -> the bootstrap's draws, shared by the systems of that size

    def counts(system: resampling.SeededSystem):
        sentences = system.statistics["BLEU"].shape[1]
        if sentences not in draws:
            draws[sentences] = resampling.bootstrap_counts(sentences)
        return draws[sentences]

    intervals = {label: significance.confidence_intervals(system, counts(system))
                 for label, (_, system) in systems.items()}
    tests = []
    for budget in dict.fromkeys(budget for budget, _ in systems.values()):
        at_budget = [system for b, system in systems.values() if b == budget]
        tests += significance.paired_tests(at_budget, counts(at_budget[0]))
    tests = significance.adjust(tests)

    laws = [law for family in dict.fromkeys(group.family for group in groups)
            if (law := _family_law(family, summaries)) is not None]
    family_laws = compute_laws.family_laws(summaries)
    return {"groups": summaries, "intervals": intervals, "tests": tests,
            "alpha": significance.ALPHA, "agreement": significance.AGREEMENT,
            "frontier": frontier.frontier_rows(laws), "crossovers": frontier.crossovers(laws),
            "laws": family_laws, "law_crossovers": compute_laws.crossovers(family_laws, summaries)}


def _label(group: ModelAtBudget, several_budgets: bool) -> str:
    return f"{group.model} @ {group.budget:.2g}".replace("e+", "e") if several_budgets and group.budget else group.model


def _system(label: str, group: ModelAtBudget, outputs: dict) -> resampling.SeededSystem:
    """The group's seeds, each with its own output on the shared test set."""
    return resampling.seeded_system(label, [run.get("seed") for run in group.runs],
                                    [outputs[run["name"]] for run in group.runs], significance.metrics())


def _family_law(family: str, summaries: list[dict]) -> frontier.PowerLaw | None:
    """The family's law through each of its models' mean BLEU at each budget."""
    points = [(row["train_flops"], row["bleu"]["mean"]) for row in summaries
              if row["family"] == family and row["bleu"]["mean"] is not None]
    return frontier.fit_power_law(family, [flops for flops, _ in points], [bleu for _, bleu in points])
