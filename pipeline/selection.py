"""Select, then confirm: which round of a select section a store has reached.

A config with a ``select`` section (stages/select/) runs in rounds. The first trains
every model's candidates (each size at each rate of ``select.learning_rates``) on the
selection seeds and chooses among them in one select stage per model. Where a choice
sits at an edge of the sizes or rates tried, the select stage names candidates beyond
it, and the next round trains them beside the ones already trained (cached) and chooses
again, up to ``select.max_extensions`` times. Once no select stage asks for more, the
choice is settled: the chosen configurations train on the experiment's ``seeds``, and
those runs alone are evaluated on the test set and reported.

Which candidates a round trains depends on what the rounds before it chose, so the
graph of a select config is known round by round: ``current_round`` reads the store's
select artifacts (keys depend only on configs and upstream keys, so a round's are known
before it runs) and returns the experiment as it stands, with the round's candidates,
or settled with its choice. ``nmt run`` plans and runs that, then asks again until
nothing is left to run (``pipeline/commands/run.py``); ``nmt status`` shows it.
"""

from __future__ import annotations

from pipeline.config import ExperimentConfig, budget_label
from pipeline.core.artifacts import ArtifactState, ArtifactStore
from pipeline.graph import PlannedStage, find_stage, plan
from stages.select.artifact import CHOICE_FILE, SelectionChoice, parse_selection
from stages.shared.names import select_stage


def current_round(config: ExperimentConfig, store: ArtifactStore, verify: bool = False) -> ExperimentConfig:
    """``config`` at the round of selection ``store`` has reached: with that round's
    candidates while any of its select stages is not in the store, else settled with
    each model's choice. A config without a select section, as it is."""
    if config.select is None:
        return config
    candidates = config.first_candidates()
    for used in range(config.select.max_extensions + 1):
        round_ = config.model_copy(update={"candidates": candidates, "extensions_used": used})
        choices = _choices(round_, plan(round_, store, verify=verify), store)
        if choices is None:
            return round_
        added = {name: [(entry.size, entry.lr) for entry in choice.extend] for name, choice in choices.items()}
        if not any(added.values()):
            return round_.model_copy(update={"chosen": {
                name: {entry.budget: (entry.size, entry.lr) for entry in choice.budgets if entry.size is not None}
                for name, choice in choices.items()}})
        candidates = {name: candidates[name] + added[name] for name in candidates}
    raise AssertionError("a select stage asked for candidates with no extension left")


def selection_line(round_: ExperimentConfig) -> str:
    """What ``nmt status`` says of a select config's round."""
    if round_.chosen is None:
        return (f"selection: round {round_.extensions_used + 1} of at most {round_.select.max_extensions + 1}; "
                "the runs that confirm the choice are planned once every select stage has chosen")
    chosen = "; ".join(f"{model} " + ", ".join(f"{budget_label(budget)}: {size} at {lr:g}"
                                               for budget, (size, lr) in at.items())
                       for model, at in round_.chosen.items())
    return f"selection: settled after {round_.extensions_used + 1} round(s): {chosen or 'nothing translated'}"


def plan_experiment(config: ExperimentConfig, store: ArtifactStore, until: str | None = None,
                    force: tuple[str, ...] = (), verify: bool = False) -> list[PlannedStage]:
    """``graph.plan`` of the experiment at the round its store has reached."""
    return plan(current_round(config, store, verify), store, until, force, verify)


def _choices(round_: ExperimentConfig, planned: list[PlannedStage],
             store: ArtifactStore) -> dict[str, SelectionChoice] | None:
    """Each model's choice in this round, None while any select stage is still to run."""
    found = {}
    for model in round_.models:
        item = find_stage(planned, select_stage(model.name))
        if item.status.state != ArtifactState.CACHED:
            return None
        text = store.read_files(item.stage.name, item.key, (CHOICE_FILE,))[CHOICE_FILE].decode()
        found[model.name] = parse_selection(text, f"{item.stage.name}/{item.key}/{CHOICE_FILE}")
    return found
