"""Choosing among a configured model's candidates at each budget, and what to try next
where a choice sits at an edge: plain functions over measured runs (no torch)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from statistics import fmean

from stages.select.artifact import BudgetChoice, Candidate, CandidateScore
from stages.shared import gate
from stages.tune import beyond
from stages.tune.artifact import grid_edge


@dataclass(frozen=True)
class Measured:
    """One candidate run: what the select stage measured of it."""

    size: str
    lr: float
    budget: float
    seed: int
    valid_loss: float | None  # its final validation loss (None: it never validated)
    source_use: float | None
    source_use_error: float | None


def choose(measured: list[Measured], budgets: list[float], ladder: list[str]) -> list[BudgetChoice]:
    """At each budget, every candidate's score over its seeds and the chosen one: the
    lowest mean final validation loss among the candidates all of whose seeds translate."""
    return [_at_budget([run for run in measured if run.budget == budget], budget, ladder) for budget in budgets]


def _at_budget(runs: list[Measured], budget: float, ladder: list[str]) -> BudgetChoice:
    candidates = sorted({(run.size, run.lr) for run in runs}, key=lambda pair: (ladder.index(pair[0]), pair[1]))
    scores = [_score([run for run in runs if (run.size, run.lr) == pair], *pair) for pair in candidates]
    eligible = [score for score in scores if score.translates == gate.TRANSLATES and score.valid_loss is not None]
    if not eligible:
        return BudgetChoice(budget=budget, size=None, lr=None, size_edge=None, rate_edge=None, candidates=scores)
    best = min(eligible, key=lambda score: score.valid_loss)
    sizes = sorted({score.size for score in scores}, key=ladder.index)
    rates = sorted(score.lr for score in scores if score.size == best.size)
    size_edge = "smallest" if best.size == sizes[0] else "largest" if best.size == sizes[-1] else None
    return BudgetChoice(budget=budget, size=best.size, lr=best.lr, size_edge=size_edge,
                        rate_edge=grid_edge(best.lr, rates) if len(rates) > 1 else None, candidates=scores)


def _score(runs: list[Measured], size: str, lr: float) -> CandidateScore:
    runs = sorted(runs, key=lambda run: run.seed)
    verdicts = [gate.source_use_verdict(run.source_use, run.source_use_error) for run in runs]
    losses = [run.valid_loss for run in runs]
    finite = all(loss is not None and math.isfinite(loss) for loss in losses)
    why = "; ".join(f"seed {run.seed}: " + " and ".join(reasons) for run, (_, reasons) in zip(runs, verdicts)
                    if reasons)
    return CandidateScore(size=size, lr=lr, valid_loss=fmean(losses) if finite else None, valid_losses=losses,
                          source_use=[run.source_use for run in runs],
                          translates=gate.group_verdict([{"translates": verdict} for verdict, _ in verdicts]),
                          why=why or None)


def extensions(choices: list[BudgetChoice], ladder: list[str]) -> list[Candidate]:
    """The candidates to add where a budget's choice sits at an edge: the next width of
    the ladder past a size edge, at the rates the chosen size tried; and, past a rate
    edge, the next rate at the grid's own ratio there. Never one tried already."""
    tried = {(score.size, score.lr) for choice in choices for score in choice.candidates}
    added: dict[tuple[str, float], None] = {}
    for choice in choices:
        if choice.size is None:
            continue
        rates = sorted(score.lr for score in choice.candidates if score.size == choice.size)
        if choice.size_edge is not None:
            step = -1 if choice.size_edge == "smallest" else 1
            index = ladder.index(choice.size) + step
            if 0 <= index < len(ladder):
                added.update(dict.fromkeys((ladder[index], rate) for rate in rates))
        if choice.rate_edge is not None:
            # Rounded to 3 significant digits, as a config would write it.
            added[(choice.size, float(f"{beyond(rates, choice.rate_edge):.3g}"))] = None
    return [Candidate(size=size, lr=lr) for size, lr in added if (size, lr) not in tried]
