"""What every Ray Train worker does before its loop: take its threads and device, fetch
the tokenized data onto its node, build the model and its DeepSpeed engine from the
same seed as every other worker, and restore the newest complete checkpoint, if any."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import torch

from pipeline.core.context import MetricsSink, WorkerTurn
from pipeline.core.timeline import mark
from stages.shared.inference.model_file import build_for_vocabulary, vocabulary_facts
from stages.shared.models.flops import training_flops
from stages.train import checkpointer, plan
from stages.train.checkpoints import Checkpoints
from stages.train.config import TrainConfig, TrainStageConfig
from stages.train.batching import token_batches
from stages.train.data import TokenizedSplit
from stages.train.deepspeed_config import bf16_autocast
from stages.train.engine import build_engine
from stages.train.loop import TrainLoop
from stages.train.loop_state import Curve, LoopState
from stages.train.precision_probe import PROBE_SEED, auto_precision
from stages.train.progress import STABLE_PHASE_END, TrainingProgress
from stages.train.row_log import RowLog
from stages.train.schedule import Spent
from stages.train.session import RayTrainSession
from stages.train.validation import BestWeights, BleuValidation, LossValidation
from stages.train.worker_device import worker_hardware


@dataclass(frozen=True)
class WorkerArgs:
    """What the train stage hands each of its workers (pickled by Ray Train)."""

    config: TrainStageConfig
    lr: float  # the peak learning rate: train.lr, or the rate the model's tune stage chose (lr_from)
    fetch_tokenized: Callable[[], Path]  # the tokenize artifact, local to the worker that calls it
    # Ray Train's run directory on the artifact store (``filesystem``), where workers look
    # for the newest complete checkpoint when they start (``checkpointer.newest_resumable``).
    run_dir: str
    filesystem: Any  # a pyarrow filesystem
    metrics_sink: MetricsSink | None  # rank 0 logs its rows there as it trains
    training_turn: WorkerTurn | None  # rank 0 reports that the workers are placed: the next train stage may ask
    # The artifact of the train stage this run continues (``TrainStageConfig.start_from``),
    # local to the worker that calls it; None for a run from nothing.
    fetch_start: Callable[[], Path] | None = None


def train_worker(loop_config: dict) -> None:
    """Ray Train's ``train_loop_per_worker``, which takes a dict: ``loop_config["args"]``
    is the stage's ``WorkerArgs``; ``loop_config["session"]``, what runs the worker
    (session.py): Ray Train's worker group where it is absent."""
    args: WorkerArgs = loop_config["args"]
    session = loop_config.get("session") or RayTrainSession()
    config = args.config
    training = config.train
    rank, world = session.rank_and_world()
    stage = f"train/{config.model.name}"
    if rank == 0:
        mark(stage, "worker started")
    if rank == 0 and args.training_turn is not None:
        args.training_turn.started()
    device, threads = _take_device(training)
    tokenized = args.fetch_tokenized()
    train_split, valid_split = TokenizedSplit(tokenized, "train"), TokenizedSplit(tokenized, "valid")
    facts = vocabulary_facts(tokenized, train_split.vocab)
    if rank == 0:
        mark(stage, "data ready")
    torch.manual_seed(training.seed)  # the same initial weights on every worker
    model = build_for_vocabulary(config.model, facts)

    def measure(found):  # precision auto on a CPU with native bf16: one batch for every seed
        batch = train_split.batch(token_batches(train_split.src_lengths, train_split.tgt_lengths,
                                                training.max_tokens, PROBE_SEED, 0)[0])
        return auto_precision(model, batch, facts["special_ids"]["pad"], found, training.label_smoothing)

    hardware = worker_hardware(training, device, threads, world, measure=measure)
    updates = None
    if plan.needs_planning(config):
        # Fractions of the run (warmup, checkpoints, ae_fraction) in updates, the same on
        # every worker: planned from the data and the model's FLOPs, before training.
        updates = plan.planned_updates(training, train_split.src_lengths, train_split.tgt_lengths, world,
                                       lambda s, t, source: training_flops(model, s, t, source),
                                       plan.source_logit_schedule(model, config.model.settings))
        plan.check_warmup_before_decay(training, updates)
    run_plan = plan.plan_run(config, args.lr, updates)
    plan.apply_settings(model, run_plan)
    progress, history, best = TrainingProgress(), [], None
    # The schedule reads what has been spent through the name ``progress``, not this
    # object: restoring a checkpoint below rebinds the name to the restored progress.
    # DeepSpeed steps the schedule inside an update, before the loop counts it, so the
    # counts cover ``progress.step`` updates then, in a resumed run as in a fresh one.
    engine = build_engine(model, training, run_plan, hardware["precision"],
                          spent=lambda: Spent(progress.step, progress.train_flops, progress.train_tokens))

    checkpoint = checkpointer.newest_resumable(args.run_dir, args.filesystem, world, training.zero_stage, session)
    if checkpoint is not None:
        with checkpoint.as_directory() as directory:
            progress, history, best = checkpointer.restore(engine, Path(directory))
        progress.restarts += 1
        progress.preempted = False  # the checkpoint was written on SIGTERM; the ones from here are not
        if rank == 0:
            checkpointer.drop_snapshots_after(args.run_dir, args.filesystem, progress.step)
            mark(stage, f"resumed at update {progress.step}")
            print(f"train {config.model.name}: resumed from its checkpoint at update {progress.step:,}", flush=True)
    elif args.fetch_start is not None:
        progress, history, best = _continue(engine, config, args.fetch_start(), world)
        if config.until_decay:
            _rate_under_this_schedule(engine, history, progress.step)
    progress.hardware = hardware  # this attempt's: a resumed run may land on other hardware
    if rank == 0:
        mark(stage, "engine ready")

    # The loop and its schedules, which share the engine, progress and curve: rank 0
    # logs the curve live where the run is tracked.
    state = LoopState(engine, rank, world, progress, Curve(history, args.metrics_sink if rank == 0 else None),
                      autocast=bf16_autocast(hardware["precision"]))
    best_weights = BestWeights(state, training.best_metric, best)
    validations = [LossValidation(state, valid_split, training.max_tokens, facts["special_ids"]["pad"],
                                  training.valid_every, best_weights)]
    if training.valid_bleu_every is not None:
        from stages.train.validation_bleu import BleuValidator

        validator = BleuValidator(tokenized, train_split, valid_split, training, str(engine.device),
                                  hardware["precision"], rank, world)
        validations.append(BleuValidation(state, validator, training.valid_bleu_every, best_weights))
    rows = RowLog(state, training.log_every, progress.log_window)
    checkpoints = Checkpoints(state, training, run_plan.checkpoint_every, session, args.run_dir, args.filesystem, rows,
                              best_weights)
    TrainLoop(state, config, run_plan, train_split, facts["special_ids"]["pad"], rows, validations, checkpoints).run()


def _take_device(training: TrainConfig) -> tuple[str, int]:
    """This worker's device and CPU threads: as many threads as the CPUs Ray gave it, never
    more (config.py checks); on a GPU, the one Ray Train gave it."""
    threads = training.threads_per_worker or training.cpus_per_worker
    torch.set_num_threads(threads)
    if not training.use_gpu:
        return "cpu", threads
    import ray.train.torch

    device = str(ray.train.torch.get_device())
    # Several workers on one node: each on the GPU Ray Train gave it. DeepSpeed puts
    # its engine on cuda:LOCAL_RANK, so LOCAL_RANK is that GPU's index here.
    torch.cuda.set_device(device)
    os.environ["LOCAL_RANK"] = str(torch.device(device).index or 0)
    return device, threads


def _continue(engine, config: TrainStageConfig, upstream: Path, world: int):
    """Restore the final checkpoint of the train stage this run continues (a budget
    branched from its stable phase, or the next segment of that phase): weights,
    optimizer, data order and what was spent, as if this run had made them."""
    from stages.train import RUN_NAME

    found = [c for c in checkpointer.complete_checkpoints(upstream / RUN_NAME, world, config.train.zero_stage)
             if c.resumable]
    if not found:
        raise RuntimeError(f"train {config.model.name!r}: {config.start_from} has no resumable checkpoint to "
                           f"continue from in {upstream}")
    start = found[-1]
    if start.progress["stop_reason"] != STABLE_PHASE_END:
        raise RuntimeError(f"train {config.model.name!r}: {config.start_from} stopped at "
                           f"{start.progress['stop_reason']!r} after {start.step} updates, not where its decay "
                           "begins: its stable phase is not the one this budget shares")
    progress, history, best = checkpointer.restore(engine, start.path)
    progress.stop_reason = ""
    progress.continued = {"stage": config.start_from, "step": progress.step, "train_flops": progress.train_flops,
                          "seconds": progress.seconds}
    return progress, history, best


def _rate_under_this_schedule(engine, history: list[dict], step: int) -> None:
    """Set the next update's rate from this run's schedule (its lambda reads the
    restored progress): a segment that continues the one before runs under a larger
    budget's schedule, while the rate restored with the optimizer is the earlier
    budget's (and may already be its first of decay). A budget's branch keeps the
    restored rate: it continues under the very schedule its segment trained with."""
    scheduler = engine.lr_scheduler
    rates = [base * rate(scheduler.last_epoch) for base, rate in zip(scheduler.base_lrs, scheduler.lr_lambdas)]
    for group, rate in zip(scheduler.optimizer.param_groups, rates):
        group["lr"] = rate
    for row in history:  # a logged row shows the next update's rate: this run's now
        if row["step"] == step and "lr" in row:
            row["lr"] = rates[0]
