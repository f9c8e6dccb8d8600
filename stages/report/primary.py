"""The declared family of primary comparisons: the pairs of systems whose difference the
report gives a verdict on, chosen from the validation split before any test is run.

By default, at each budget, each family's best size (the lowest mean validation loss
over its seeds, on the validation split, never the test set) against each other
family's best. The config's ``report.primary_comparisons`` names pairs of configured
models instead, compared at every budget where both were trained. Holm's adjustment
runs over this family alone (``significance.adjust``): adding a size or a family adds
exploratory rows, and changes a primary verdict only where it changes a family's best.
"""

from __future__ import annotations

from itertools import combinations

from stages.report.comparison_records import GroupSummary


def family_bests(groups: list[GroupSummary]) -> tuple[dict[tuple, GroupSummary], list[str]]:
    """(budget, family) -> the group chosen as the family's best there, and a sentence for
    each family whose best could not be chosen (several sizes, a validation loss missing)."""
    candidates: dict[tuple, list[GroupSummary]] = {}
    for group in groups:
        candidates.setdefault((group.budget, group.family), []).append(group)
    bests, unchosen = {}, []
    for (budget, family), sizes in candidates.items():
        if len(sizes) == 1:
            bests[(budget, family)] = sizes[0]
        elif all(size.valid_loss.mean is not None for size in sizes):
            bests[(budget, family)] = min(sizes, key=lambda size: size.valid_loss.mean or 0.0)  # each a number (above)
        else:
            unchosen.append(f"{family} at {budget:.2g} FLOPs: no best size (a validation loss is missing), so it "
                            "is in no primary comparison")
    return bests, unchosen


def primary_pairs(groups: list[GroupSummary], named: list[list[str]]) -> tuple[list[tuple[str, str]], list[str]]:
    """The primary family as pairs of group labels (a, b), in report order, and what the
    report says of how they were chosen. ``groups``: the comparison's summaries (with
    ``label``), those with test outputs only; ``named``: the config's pairs of models."""
    budgets = list(dict.fromkeys(group.budget for group in groups))
    if named:
        by_model = {(group.budget, group.model): group.label for group in groups}
        pairs = [(by_model[(budget, a)], by_model[(budget, b)]) for budget in budgets for a, b in named
                 if (budget, a) in by_model and (budget, b) in by_model]
        said = ["Primary comparisons as the config names them (report.primary_comparisons): "
                + "; ".join(f"{a} against {b}" for a, b in named) + ", at every budget where both were trained."]
        return pairs, said
    bests, unchosen = family_bests(groups)
    pairs = []
    for budget in budgets:
        at_budget = [group for (b, _), group in bests.items() if b == budget]
        pairs += [(first.label, second.label) for first, second in combinations(at_budget, 2)]
    said = ["Primary comparisons: at each budget, each family's best size (the lowest mean validation loss over its "
            "seeds, on the validation split, chosen before any test) against each other family's, on BLEU."]
    return pairs, said + unchosen
