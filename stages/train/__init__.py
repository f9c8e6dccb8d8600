"""train: one model of the config, trained with DeepSpeed on Ray Train workers.

The stage launches a ``TorchTrainer`` whose workers run ``bootstrap.train_worker`` and
persist their checkpoints to the stage's staging place on the artifact store
(``train_run/``): the staging directory of a local store, or a ``<key>.partial``
prefix of an object store, which every node of a cluster reaches. It survives a crash
(the train stage is resumable), so starting the stage again, on any node, continues
from the newest complete checkpoint, and Ray Train itself restarts a crashed worker
group from it, up to ``max_failures`` times.

When training ends the stage writes, next to the retained DeepSpeed checkpoints,
``model.pt``, ``best.pt``, ``metrics.jsonl`` and ``train_report.json``
(``outputs.py``); ``stages.shared.inference.model_file.weights_file(artifact)`` is where a reader finds the
weights.
"""

from __future__ import annotations

import time
from pathlib import Path

from pipeline.core.context import StageContext, TrainingPlacement
from pipeline.core.timeline import mark
from pipeline.core.hardware import HardwareError, detect_device, resolve_precision
from stages.shared.errors import InputDataError
from stages.tokenize import read_index
from stages.shared.models.families import family
from stages.train.config import TrainStageConfig

__all__ = ["VERSION", "RUN_NAME", "RESUMABLE", "kept_checkpoint", "task_cpus", "MLFLOW_FILES", "READS",
           "RESOURCES", "run", "train_at", "preflight", "worker_resources"]

# 3: checkpoints but the newest are slimmed to their fp32 weights
# 4: no dropout on attention weights by default, CPU dropout masks from uniform draws,
#    fused Adam: the same config trains a different model
# 5: validation BLEU rows, best.pt and early stopping by train.best_metric
# 6: train_flops_6nd side by side, the output projection counted (stages/shared/models/flops.py)
# 7: warmup, checkpoints, the averaged window and ae_steps as fractions of the run (plan.py)
# 8: a decoder-only model's source is not projected (nor counted) once L_AE has ended
# 9: ConvS2S weight-normalized (a ConvS2S artifact of 8 holds the model without it)
# 10: ConvS2S's tiny preset 64 wide, four blocks a side (presets are keyed by name)
# 11: the wsd schedule and budgets branched from one stable phase (new keys in the slice)
# 12: a checkpoint between two logged rows saves their sums: the next row after a resume or a branch covers the same updates as an uninterrupted run's
# 13: bf16 trains fp32 weights under torch.autocast on a GPU too; the loop clips at ZeRO 0
#     (one fused norm), DeepSpeed's throughput timer and a world of one's all-reduce off
# 14: validation BLEU decodes in the faster of the run's autocast precision and fp32, measured
#     at its first BLEU validation (train_report: bleu_decode_precision, bleu_probe_seconds_*)
# 15: precision auto on a CPU with native bf16 trains in the faster of bf16 and fp32,
#     measured on the run's first batch (precision_probe.py; train_report: precision_reason)
# 16: precision auto decided once per model configuration and machine (one batch for every
#     seed, a lock), bf16 only where at least 1.1x as fast as fp32
VERSION = 16
RUN_NAME = "train_run"
# A crashed attempt's staging directory holds its checkpoints: the next attempt resumes.
RESUMABLE = True
MLFLOW_FILES = ("train_report.json", "metrics.jsonl")
# Of a tune stage's artifact, only the choice (a train stage it continues is read whole).
READS = {"tune": ("choice.json",)}
RESOURCES = TrainingPlacement  # checkpoints on the object store, the order of starting


def task_cpus(config: TrainStageConfig) -> float:
    """The CPUs the stage's own task holds: none where its Ray Train workers ask for
    their own (a waiting driver task must not starve them), its one worker's where it
    trains in its own process (train.in_process), so that Ray places nothing else there."""
    training = config.train
    return float(training.cpus_per_worker) if training.trains_in_process() else 0.0


def kept_checkpoint(config: TrainStageConfig, staging: Path) -> int | None:
    """The update of the newest complete, resumable checkpoint in a train stage's staging
    directory on this machine's disk (what a rerun resumes from); None if there is none."""
    from stages.train.checkpointer import complete_checkpoints

    kept = [checkpoint.step for checkpoint in complete_checkpoints(staging / RUN_NAME, config.train.workers,
                                                                   config.train.zero_stage) if checkpoint.resumable]
    return kept[-1] if kept else None


def worker_resources(config: TrainStageConfig, cluster: dict[str, float]) -> dict[str, float]:
    """What the stage's Ray Train workers hold, all together, whatever the ``cluster``:
    the runner starts the stage once they are free, so that a queued stage holds no
    process and no actor."""
    training = config.train
    return {"CPU": float(training.workers * training.cpus_per_worker),
            **({"GPU": training.workers * training.gpus_per_worker} if training.use_gpu else {})}


def run(inputs: dict[str, Path], config: TrainStageConfig, output: Path, ctx: StageContext[TrainingPlacement]) -> dict:
    return train_at(peak_rate(inputs, config), inputs, config, output, ctx)


def train_at(lr: float, inputs: dict[str, Path], config: TrainStageConfig, output: Path,
             ctx: StageContext[TrainingPlacement]) -> dict:
    """The stage at the peak learning rate ``lr``: its own (``peak_rate``), or a tuning
    trial's."""
    # Imported here: Ray, torch and DeepSpeed load only when the stage runs, not with its config.
    import pyarrow.fs as pafs

    from stages.train.bootstrap import WorkerArgs
    from stages.train.checkpointer import complete_checkpoints, download_checkpoints
    from stages.train.outputs import write_outputs

    training, tokenized = config.train, inputs["tokenize"]
    placement = ctx.resources or TrainingPlacement()
    _check_inputs(tokenized, config)
    world, zero = training.workers, training.zero_stage
    # Where the checkpoints persist: on the artifact store, reachable from every node.
    filesystem, storage = placement.durable_staging or (pafs.LocalFileSystem(), str(output))
    run_dir = f"{storage}/{RUN_NAME}"
    args = WorkerArgs(config, lr, ctx.fetcher("tokenize", tokenized), run_dir, filesystem, ctx.metrics_sink,
                      placement.turn, _start(inputs, config, ctx))
    if placement.turn is not None:
        placement.turn.wait()  # the train stages before this one in the config ask for workers first
    started = time.time()
    mark(f"train/{config.model.name}", "fit started")
    if training.trains_in_process():
        from stages.train import in_process
        from stages.train.session import InProcessSession

        in_process.fit(args, InProcessSession(run_dir, filesystem, training.keep_checkpoints, zero,
                                              placement.report_to_tune), training.max_failures)
    else:
        _ray_train_fit(args, training, storage, filesystem, placement)
    mark(f"train/{config.model.name}", "fit returned")
    stored = complete_checkpoints(run_dir, world, zero, filesystem)
    if placement.durable_staging is not None:  # on an object store: bring them into the artifact
        download_checkpoints(stored, filesystem, output / RUN_NAME)
    checkpoints = complete_checkpoints(output / RUN_NAME, world, zero)
    if not checkpoints:
        raise RuntimeError(f"training {config.model.name!r} ended without a complete checkpoint in {output}")
    return write_outputs(output, config, lr, tokenized, checkpoints, time.time() - started)


def _ray_train_fit(args, training, storage: str, filesystem, placement: TrainingPlacement) -> None:
    """Train on Ray Train's worker group: ``training.workers`` workers, each asking Ray
    for its own CPUs (and GPU), restarted from the newest checkpoint after a crash."""
    from ray.train import CheckpointConfig, FailureConfig, LoggingConfig, RunConfig, ScalingConfig
    from ray.train.torch import TorchConfig

    from stages.train.bootstrap import train_worker
    from stages.train.ray_trainer import StageTrainer

    resources = {"CPU": training.cpus_per_worker, **({"GPU": training.gpus_per_worker} if training.use_gpu else {})}
    trainer = StageTrainer(
        train_worker,
        train_loop_config={"args": args},
        scaling_config=ScalingConfig(num_workers=training.workers, use_gpu=training.use_gpu,
                                     resources_per_worker=resources, placement_strategy=training.placement_strategy),
        torch_config=TorchConfig(backend="nccl" if training.use_gpu else "gloo"),
        run_config=RunConfig(name=RUN_NAME, storage_path=storage,
                             storage_filesystem=None if placement.durable_staging is None else filesystem,
                             failure_config=FailureConfig(max_failures=training.max_failures),
                             checkpoint_config=CheckpointConfig(num_to_keep=training.keep_checkpoints),
                             # Ray Train's own INFO lines (requesting resources, starting the
                             # group) on the console of every run: warnings and errors only.
                             logging_config=LoggingConfig(log_level="WARNING"),
                             callbacks=list(placement.callbacks)),
    )
    trainer.fit()


def peak_rate(inputs: dict[str, Path], config: TrainStageConfig) -> float:
    """The run's peak learning rate: the one its tune stage chose (``lr_from``), else
    ``train.lr``."""
    if config.lr_from is None:
        return config.train.lr
    from stages.tune.artifact import read_choice

    if config.lr_from not in inputs:
        raise InputDataError(f"train {config.model.name!r} takes its learning rate from {config.lr_from}, which is "
                             f"not among its inputs ({', '.join(inputs)})")
    return read_choice(inputs[config.lr_from]).lr


def _start(inputs: dict[str, Path], config: TrainStageConfig, ctx: StageContext):
    """What fetches the artifact of the train stage this run continues, on a worker's node."""
    if config.start_from is None:
        return None
    if config.start_from not in inputs:
        raise InputDataError(f"train {config.model.name!r} continues {config.start_from}, which is not among its "
                             f"inputs ({', '.join(inputs)})")
    return ctx.fetcher(config.start_from, inputs[config.start_from])


def preflight(config: TrainStageConfig, cpus: int) -> None:
    """Refuse, before anything starts, a train section this machine cannot run: a
    precision its device lacks, a GPU it lacks, more CPUs than its ``cpus`` (Ray Train
    would wait for them forever). For local runs; on a cluster each worker checks its
    own device when it starts."""
    import torch

    training = config.train
    if training.use_gpu and not torch.cuda.is_available():
        raise HardwareError("train.use_gpu: true, but this machine has no CUDA GPU that torch can use")
    device = detect_device("cuda" if training.use_gpu else "cpu")
    resolve_precision(training.precision, device, "train.precision")
    needed = training.workers * training.cpus_per_worker
    if needed > cpus:
        raise HardwareError(f"train.workers ({training.workers}) x train.cpus_per_worker ({training.cpus_per_worker}) "
                            f"needs {needed} CPUs, but this machine has {cpus}")


def _check_inputs(tokenized: Path, config: TrainStageConfig) -> None:
    index = read_index(tokenized)
    splits = index["splits"]
    for split in ("train", "valid"):
        if splits[split]["pairs"] == 0:
            raise InputDataError(f"train {config.model.name!r}: the tokenized {split} split is empty")
    if not index.get("append_eos", True):
        raise InputDataError(f"train {config.model.name!r}: needs tokenize.append_eos: true "
                             "(models learn where a translation ends from EOS)")
    vocab = index["vocab"]
    if family(config.model.family).joint_vocabulary and not vocab["joint"]:
        raise InputDataError(f"train {config.model.name!r}: the {config.model.family} family needs bpe.joint: true")
