"""The runs of one configured model at one budget, taken together: their seeds' mean,
standard deviation and each seed's score and validation loss."""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass

from stages.shared import gate
from stages.report.comparison_records import GroupSummary, ShortOfBudget, Spread
from stages.report.records import RunRecord



@dataclass(frozen=True)
class ModelAtBudget:
    model: str  # the configured model
    family: str
    budget: float | None  # train.max_train_flops of its runs
    runs: tuple[RunRecord, ...]  # the runs' records, by seed

    def summary(self, label: str) -> GroupSummary:
        """Per scored field: mean, sample standard deviation (None for one seed) and each
        seed's value; the mean training FLOPs and tokens the runs used; and the runs that stopped
        before their FLOPs budget (a wall time, say), which put the group short of the
        compute its label names. ``label``: what the report calls the group."""
        first = self.runs[0]
        return GroupSummary(
            label=label, model=self.model, family=self.family, budget=self.budget, preset=first.preset,
            parameters=first.parameters, non_embedding_parameters=first.non_embedding_parameters,
            seeds=[run.seed for run in self.runs],
            train_flops=statistics.fmean(_flops(run) for run in self.runs),
            train_tokens=(statistics.fmean(run.train_tokens for run in self.runs if run.train_tokens)
                          if all(run.train_tokens for run in self.runs) else None),
            short_of_budget=[ShortOfBudget(seed=run.seed, train_flops=_flops(run),
                                           stop_reason=run.stop_reason)
                             for run in self.runs
                             if self.budget and run.stop_reason not in (None, "max_train_flops")],
            bleu=_spread([run.bleu for run in self.runs if run.bleu is not None]),
            chrf=_spread([run.chrf for run in self.runs if run.chrf is not None]),
            # The validation loss (nats per target token) of the weights each run ended with:
            # its last validation. Not its best: a run that diverged late (or a branched
            # budget, whose curve holds its stable phase's) would count a loss its model no
            # longer has. Records from before the field existed: the best, from its perplexity.
            valid_loss=_spread([loss for run in self.runs if (loss := _final_loss(run)) is not None]),
            diverged_seeds=[run.seed for run in self.runs if diverged(run)],
            # The translation gate (gate.py): every seed must translate for the model to.
            translates=gate.group_verdict(self.runs),
            not_translating=gate.failing_seeds(self.runs) or None,
            source_use=_spread([run.source_use for run in self.runs if run.source_use is not None]))


# A run whose final validation loss is this much above its best had diverged by the end.
DIVERGED = 1.1


def diverged(run: RunRecord) -> bool:
    """Whether the run ended with a validation loss over ``DIVERGED`` times its best (its
    weights no longer the model it had been): the RNN w16 at 3e11 in the frontier
    study's partial run ended at 6.67 nats after a best of 3.78."""
    final, best = run.final_valid_loss, run.best_valid_ppl
    return final is not None and best is not None and best > 0 and final > DIVERGED * math.log(best)


def _flops(run: RunRecord) -> float:
    if run.train_flops is None:
        raise ValueError(f"{run.name}: its record has no train_flops (the training FLOPs every group is summed by)")
    return run.train_flops


def _final_loss(run: RunRecord) -> float | None:
    final, best = run.final_valid_loss, run.best_valid_ppl
    if final is not None:
        return final
    return math.log(best) if best else None


def _spread(values: list[float]) -> Spread:
    return Spread(mean=statistics.fmean(values) if values else None,
                  std=statistics.stdev(values) if len(values) > 1 else None, each=values)


def group_runs(records: list[RunRecord]) -> list[ModelAtBudget]:
    """The records grouped by configured model and budget, in the order first seen;
    each group's runs ordered by seed."""
    groups: dict[tuple, list[RunRecord]] = {}
    for record in records:
        # Reports written before runs had a model, seed and budget: each run on its own.
        groups.setdefault((record.model or record.name, record.budget), []).append(record)
    return [ModelAtBudget(model, runs[0].family or model, budget, tuple(sorted(runs, key=lambda run: run.seed or 0)))
            for (model, budget), runs in groups.items()]
