"""One tuning trial: the train stage itself (its Ray Train workers, DeepSpeed engine,
FLOPs counting and data), at one learning rate and the tuning budget. Each checkpoint
it reports (one after every validation) reaches Ray Tune with the best validation loss
so far, which ASHA compares: through Ray Train's ``TuneReportCallback``, or, for a run
in the trial's own process (train.in_process), through ``ray.tune.report`` directly."""

from __future__ import annotations

import re
from pathlib import Path

from pipeline.core.context import StageContext, TrainingPlacement
from stages.train.config import TrainConfig, TrainStageConfig


def trial_config(config: TrainStageConfig, budget: float) -> TrainStageConfig:
    """The train stage's config for a trial: the tuning budget alone (wall time stays a
    cap), a resumable checkpoint (and so a report to Tune, which counts ASHA's
    ``grace_validations`` in reports) after every validation, the loss alone judging (no
    BLEU decoding, no early stopping of its own), one checkpoint kept, and the final
    weights unaveraged."""
    changes = {"max_train_flops": budget, "max_steps": None, "max_epochs": None, "max_train_tokens": None,
               "valid_bleu_every": None, "best_metric": "valid_loss",
               "early_stopping_patience": None, "checkpoint_every": config.train.valid_every,
               "checkpoint_fraction": None, "resume_every": None, "average_fraction": None, "average_last": 1,
               "keep_checkpoints": 1}
    train = TrainConfig.model_validate({**config.train.model_dump(exclude_unset=True), **changes})
    return config.model_copy(update={"train": train})


def run_trial(params: dict, *, config: TrainStageConfig, tokenized: Path, root: str) -> None:
    """Ray Tune's function trainable: train at ``params["lr"]`` into ``root``/lr_<rate>."""
    import ray.tune
    from ray.tune.integration.ray_train import TuneReportCallback

    from stages import train

    rate = params["lr"]
    output = Path(root) / trial_name(rate)
    output.mkdir(parents=True, exist_ok=True)
    train.train_at(rate, {"tokenize": tokenized}, config, output,
                   StageContext(resources=TrainingPlacement(callbacks=(TuneReportCallback(),),
                                                            report_to_tune=ray.tune.report)))


def stage_trainable(stage_id: str):
    """``run_trial`` under a name of this stage's own (``stage_id``: its staging
    directory's name, unique among the stages of a run).

    Ray Tune registers a trainable under its ``__name__``, and ``with_parameters`` stores
    its arguments under ``str(trainable)``, both in a store shared by every task of the
    Ray job: two tune stages running at once, both as ``run_trial``, overwrote each
    other's registration, and one stage's trials ran with the other's model, budget and
    output directory, or never started."""
    name = "trial_" + re.sub(r"\W", "_", stage_id)

    def trainable(params: dict, **arguments) -> None:
        run_trial(params, **arguments)

    trainable.__name__ = trainable.__qualname__ = name
    return trainable


def trial_name(rate: float) -> str:
    return f"lr_{rate:g}"
