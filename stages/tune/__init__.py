"""tune: one model size's peak learning rate, chosen by Ray Tune on validation loss.

One trial per rate of ``tune.learning_rates`` (a grid search), each the train stage
itself at that rate and the tuning budget (``trials.py``), all at once where the
cluster holds them, else one at a time in the grid's order (``concurrent_trials``);
ASHA (asynchronous successive halving, Li et al. 2020) compares the trials' best
validation loss after ``grace_validations`` validations and at every rung after, and
stops all but the best 1/``reduction_factor`` there. The rate whose trial reached the
lowest validation loss is the best; a trial that diverged (no finite loss) can never be.
Where the best rate is the lowest or highest rate tried, the best may lie beyond the
grid: the stage tries the next rate out, at the grid's own ratio at that edge (four
rates 2e-3 to 1.6e-2 choosing 1.6e-2: 3.2e-2), and chooses again, up to
``tune.max_extensions`` times; ``choice.json`` says whether the best rate is still at an
edge (``at_edge``). The rate chosen is the best, or with ``tune.prefer_lower_within``
the lowest rate whose trial came within that many nats of it (``choose``).

The artifact: ``choice.json`` (the rate, and per rate tried its best validation loss,
validations, FLOPs and whether ASHA stopped it) and each trial's ``metrics.jsonl`` and
``train_report.json`` (``trials/lr_<rate>/``), and what Ray Tune printed
(``tune_console.log``); the trials' checkpoints and weights are dropped. The train runs of the model size read the rate
(``TrainStageConfig.lr_from``).
"""

from __future__ import annotations

import contextlib
import json
import math
import shutil
from pathlib import Path

from pipeline.core.context import StageContext
from stages.tune.artifact import CHOICE_FILE, TuneChoice, grid_edge, read_choice
from stages.tune.config import TuneStageConfig

__all__ = ["VERSION", "TASK_CPUS", "MLFLOW_FILES", "run", "worker_resources", "concurrent_trials", "read_choice",
           "grid_edge", "beyond", "choose"]

# 2: the grid extended past an edge its best rate was on (tune.max_extensions)
# 3: each stage's trainable under its own name: two tune stages at once had overwritten
#    each other's registration in the Ray job, so a choice made beside another may be wrong
# 4: its trials train with train VERSION 13's engine (the loop's own clipping)
# 5: tune.prefer_lower_within; choice.json names the best rate beside the chosen one
# 6: its trials train with train VERSION 14 (validation BLEU's decoding precision measured)
# 7: Ray Tune's own console output kept in tune_console.log, off the console; its trials
#    train with train VERSION 15 (precision auto measured)
# 8: its trials train with train VERSION 16 (precision auto once per model and machine)
VERSION = 8
# The stage's own task holds no CPU: its trials' Ray Train workers ask for theirs.
TASK_CPUS = 0
MLFLOW_FILES = (CHOICE_FILE,)
TRIALS = "trials"
KEPT = ("metrics.jsonl", "train_report.json")  # of each trial's output
CONSOLE_LOG = "tune_console.log"  # what Ray Tune printed


def worker_resources(config: TuneStageConfig, cluster: dict[str, float]) -> dict[str, float]:
    """The workers of the trials it runs at once (``concurrent_trials``): the stage
    starts once they are free beside the stages running now (pipeline/admission.py)."""
    trials = concurrent_trials(config, cluster)
    return {kind: trials * amount for kind, amount in _trial_resources(config).items()}


def _trial_resources(config: TuneStageConfig) -> dict[str, float]:
    training = config.train
    return {"CPU": float(training.workers * training.cpus_per_worker),
            **({"GPU": training.workers * training.gpus_per_worker} if training.use_gpu else {})}


def _trial_process_resources(config: TuneStageConfig) -> dict[str, float]:
    """What a trial's own process holds: its worker's CPUs where it trains there
    (train.in_process); else none, since its Ray Train workers ask for theirs, and Tune
    needs some resource to place it by: one byte of memory."""
    training = config.train
    return {"cpu": float(training.cpus_per_worker)} if training.trains_in_process() else {"memory": 1}


def concurrent_trials(config: TuneStageConfig, cluster: dict[str, float]) -> int:
    """How many trials run at once: the whole grid where the cluster
    (``ray.cluster_resources()``) holds every trial's workers, else one at a time.

    A stage that ran as many as fit (two of three trials on two CPUs) would hold the whole
    cluster, and its third trial and each extension of the grid would run alone beside an
    idle CPU while every other stage waited: in a study with one tune stage per size that
    left half of a 2-core machine idle for most of the tuning. One trial at a time lets
    tune stages and train stages fill the cluster side by side; a later trial also meets
    ASHA's rungs set by the trials before it, which can stop it early."""
    fits = min(int(cluster.get(kind, 0.0) // amount) for kind, amount in _trial_resources(config).items() if amount)
    trials = len(config.tune.learning_rates)
    return trials if fits >= trials else 1


def run(inputs: dict[str, Path], config: TuneStageConfig, output: Path, ctx: StageContext) -> dict:
    # Imported here: Ray Tune loads only when the stage runs, not with its config.
    import ray
    from ray import tune
    from ray.tune.schedulers import ASHAScheduler

    from stages.train.config import TrainStageConfig
    from stages.tune.trials import stage_trainable, trial_config, trial_name

    settings = config.tune
    base = trial_config(TrainStageConfig(model=config.model, train=config.train), settings.budget)
    trials = output / TRIALS
    trainable = tune.with_parameters(stage_trainable(output.name), config=base, tokenized=inputs["tokenize"],
                                     root=str(trials))

    def fit(rates: list[float], round_: int) -> list:
        tuner = tune.Tuner(
            tune.with_resources(trainable, _trial_process_resources(config)),
            param_space={"lr": tune.grid_search(rates)},
            tune_config=tune.TuneConfig(
                metric="best_valid_loss", mode="min",
                max_concurrent_trials=concurrent_trials(config, ray.cluster_resources()),
                scheduler=ASHAScheduler(time_attr="training_iteration", grace_period=settings.grace_validations,
                                        reduction_factor=settings.reduction_factor, max_t=1_000_000)),
            run_config=tune.RunConfig(name=f"tune_run_{round_}", storage_path=str(output), verbose=0),
        )
        # Tune prints its own reports (configuration boxes, where its results are, a
        # TensorBoard hint) whatever its verbosity: kept in the artifact, off the console,
        # which shows the pipeline's progress and results only.
        with open(output / CONSOLE_LOG, "a", encoding="utf-8") as log, contextlib.redirect_stdout(log):
            results = tuner.fit()
        return [{**_trial_row(result, trials / trial_name(result.config["lr"])), "extension": round_ > 0}
                for result in results]

    rows, rates, extensions = [], list(settings.learning_rates), 0
    while True:
        rows += fit(rates, extensions)
        finite = [row for row in rows if math.isfinite(row["best_valid_loss"])]
        if not finite:
            raise RuntimeError(f"tune {config.model.name!r}: no trial reached a finite validation loss at any of the "
                               f"rates {sorted(row['lr'] for row in rows)}: lower tune.learning_rates")
        best = choose(finite, None)
        tried = sorted(row["lr"] for row in rows)
        edge = grid_edge(best["lr"], tried)
        if edge is None or extensions >= settings.max_extensions:
            break
        rates, extensions = [beyond(tried, edge)], extensions + 1
    chosen = choose(finite, settings.prefer_lower_within)
    for trial in trials.iterdir():  # the curves and totals stay; checkpoints and weights go
        for path in trial.iterdir():
            if path.name not in KEPT:
                shutil.rmtree(path) if path.is_dir() else path.unlink()
    for round_ in range(extensions + 1):
        shutil.rmtree(output / f"tune_run_{round_}", ignore_errors=True)
    # JSON has no infinity: a trial without a finite loss shows null.
    shown = [{**row, "best_valid_loss": row["best_valid_loss"] if math.isfinite(row["best_valid_loss"]) else None}
             for row in sorted(rows, key=lambda row: row["lr"])]
    choice = TuneChoice(lr=chosen["lr"], metric="best validation loss", budget=settings.budget, best_lr=best["lr"],
                        prefer_lower_within=settings.prefer_lower_within, extensions=extensions, at_edge=edge,
                        trials=shown)
    (output / CHOICE_FILE).write_text(json.dumps(choice.to_json(), indent=2))
    return {"lr": chosen["lr"], "best_valid_loss": chosen["best_valid_loss"], "trials": len(rows),
            "stopped_early": sum(row["stopped_early"] for row in rows), "extensions": extensions,
            "at_edge": edge or "inside"}


def choose(finite: list[dict], prefer_lower_within: float | None) -> dict:
    """The trial row whose rate is chosen among ``finite`` (trials with a finite best
    validation loss): the lowest loss, or with ``prefer_lower_within`` the lowest rate
    whose loss is within that many nats of the lowest."""
    best = min(finite, key=lambda row: row["best_valid_loss"])
    if prefer_lower_within is None:
        return best
    return min((row for row in finite if row["best_valid_loss"] <= best["best_valid_loss"] + prefer_lower_within),
               key=lambda row: row["lr"])


def beyond(tried: list[float], edge: str) -> float:
    """The next rate past an edge of the sorted ``tried``, at the grid's ratio there."""
    if edge == "highest":
        return tried[-1] * tried[-1] / tried[-2]
    return tried[0] * tried[0] / tried[1]


def _trial_row(result, directory: Path) -> dict:
    """What one trial reached: its best validation loss (inf if none was finite), how
    many validations it reported, its FLOPs, and whether it ended before its budget."""
    history = result.metrics_dataframe
    reports = 0 if history is None else len(history)
    losses = [] if history is None else [value for value in history["best_valid_loss"] if math.isfinite(value)]
    completed = (directory / "train_report.json").is_file()
    return {"lr": result.config["lr"], "best_valid_loss": min(losses) if losses else math.inf,
            "validations": reports, "train_flops": float(history["train_flops"].iloc[-1]) if reports else 0.0,
            "stopped_early": not completed, "error": None if result.error is None else str(result.error)[:300]}
