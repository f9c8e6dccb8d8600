"""The training loop that every Ray Train worker runs, and its accounting.

Each worker builds the same model from the same seed, wraps it in a DeepSpeed engine
(data parallel over Ray Train's process group, ZeRO stage from the config), and
trains on its share of the token-budget batches. After every optimizer update the
workers sum their counts (tokens, FLOPs, seconds) in one all-reduce, so every worker
sees the same totals and stops at the same update. Dropout is seeded from (seed,
rank, batch number), so a resumed run draws the same masks as an uninterrupted one.

On a GPU the host queues work ahead of the device, and every value read back from
the device makes it wait. So the loop reads back only what the budgets need: the
per-update counts are host numbers (the batches' sizes and the clock); the losses and
the gradient norm stay on the device and are read once per logged row; batches are
copied from pinned memory, so the copy does not wait either, and the next batch is
built on the host while the device trains on this one. The remaining waits per update
are DeepSpeed's own (fp16's overflow check) and, with several workers, the all-reduce
of the counts (tests/unit/stages/train/test_step_overhead.py counts them on a CPU).

After each update the loop hands over to its schedules, which decide for themselves
whether to act: the validations (``validation.py``), then the checkpoints
(``checkpoints.py``); the rows are ``row_log.py``. What a worker does before the loop
(device, data, engine, restoring a checkpoint, building these parts) is ``bootstrap.py``;
the bar is ``budget_bar.py``.
"""

from __future__ import annotations

import collections
import time

import torch

from pipeline.core.timeline import mark
from stages.shared.models.flops import projects_source, training_flops
from stages.shared.models.loss import translation_loss
from stages.train import preemption
from stages.train.batching import batches_from, token_batches
from stages.train.budget_bar import BudgetBar
from stages.train.checkpoints import Checkpoints
from stages.train.config import TrainStageConfig
from stages.train.data import Batch, TokenizedSplit
from stages.train.deepspeed_config import loop_clips
from stages.train.engine import compiled_graphs
from stages.train.loop_state import LoopState
from stages.train.plan import RunPlan
from stages.train.progress import STABLE_PHASE_END, TrainingProgress, budget_reached
from stages.train.row_log import RowLog


class TrainLoop:
    def __init__(self, state: LoopState, config: TrainStageConfig, run: RunPlan, train_split: TokenizedSplit,
                 pad_id: int, rows: RowLog, validations: list, checkpoints: Checkpoints | None):
        self.state, self.config, self.training, self.run_plan = state, config, config.train, run
        self.train_split, self.pad_id = train_split, pad_id
        # The schedules: the validations (loss, then BLEU) and the checkpoints; None only where
        # a test drives single updates (tests/train_loops.py), which never reach them.
        self.rows, self.validations, self.checkpoints = rows, validations, checkpoints
        self.clips = loop_clips(self.training, state.progress.hardware["precision"])  # else DeepSpeed clips, if at all
        # Counted FLOPs per (source length, target length, source logits): a batch has
        # hundreds of sentences but few distinct length pairs.
        self.flops_of_pair: dict[tuple[int, int, bool], int] = {}
        self.preempt = False  # a worker got SIGTERM: stop after this update (preemption.py)

    @property
    def engine(self):
        return self.state.engine

    @property
    def progress(self) -> TrainingProgress:
        return self.state.progress

    def run(self) -> None:
        progress = self.progress
        if progress.stop_reason and progress.last_checkpoint_step == progress.step:
            return  # restored from the final checkpoint of a finished run: nothing left to do
        preemption.TRAINING.set()  # from here a SIGTERM stops the run at an update's end
        try:
            self._run()
        finally:
            preemption.TRAINING.clear()
        self.state.curve.drain()  # the curve complete in the tracker before the stage ends

    def _run(self) -> None:
        progress = self.progress
        bar = self._progress_bar()
        bar.show(progress)  # a resumed run starts where it left off
        started = time.perf_counter() - progress.seconds
        batches = batches_from(progress.position, self.train_split.src_lengths, self.train_split.tgt_lengths,
                               self.training.max_tokens, self.training.seed, self.state.rank, self.state.world)
        self.state.model.train()
        for validation in self.validations:  # a run preempted right after an update, before it validated
            validation.after_update()
        progress.stop_reason = self._stop_reason()
        first = True
        while not progress.stop_reason:
            if not self.train_update(batches, started):
                break
            if first:  # of this attempt
                self._mark("first update")
                first = False
            # Each update, where marks are on: benchmarks count the updates a fault cost.
            self._mark(f"update {progress.step}")
            bar.show(progress)
            if self.preempt:
                bar.close()
                self._stop_preempted()
            for validation in self.validations:
                validation.after_update()
            progress.stop_reason = self._stop_reason()
            self.checkpoints.after_update()
        bar.close()
        self._mark("last update")
        # The end of a run is always validated and checkpointed: the final model and
        # the stop reason are read from that last checkpoint.
        for validation in self.validations:
            validation.at_end()
        self._mark("validated")
        if self.training.compile:  # after the last validation, which may be the first to compile its graph
            progress.hardware["compiled_graphs"] = compiled_graphs()
        self.checkpoints.save()
        self._mark("checkpointed")

    def _mark(self, event: str) -> None:
        if self.state.rank == 0:
            mark(f"train/{self.config.model.name}", event)

    def _stop_preempted(self) -> None:
        """A worker got SIGTERM (all agreed on it after this update): checkpoint this
        update and stop; the run resumes from it."""
        self.checkpoints.at_preemption()
        self._mark("preemption checkpointed")
        raise preemption.Preempted(f"train {self.config.model.name!r}: SIGTERM; stopped after update "
                                   f"{self.progress.step} with a complete checkpoint of it, which the next attempt "
                                   "resumes from")

    def _stop_reason(self) -> str:
        """The budget used up, or, in a stable-phase segment, the decay's start: the rate
        DeepSpeed set for the next update is below the peak once the warmup is over
        (schedule.py returns the peak itself until the decay begins)."""
        reason = budget_reached(self.training, self.progress)
        if (not reason and self.config.until_decay and self.progress.step >= self.run_plan.warmup_steps
                and self.engine.get_lr()[0] < self.run_plan.lr):
            reason = STABLE_PHASE_END
        return reason

    def _progress_bar(self) -> BudgetBar:
        """Rank 0's bar, drawn on the driver by Ray, in updates (budget_bar.py)."""
        if self.state.rank != 0:
            return BudgetBar("", self.training, 0, enabled=False)
        per_epoch = len(token_batches(self.train_split.src_lengths, self.train_split.tgt_lengths,
                                      self.training.max_tokens, self.training.seed, 0)) // self.state.world
        return BudgetBar(f"train {self.config.model.name}", self.training, per_epoch, enabled=True)

    def train_update(self, batches, started: float) -> bool:
        """One optimizer update over ``gradient_accumulation`` batches, and its accounting.
        False, with nothing trained, when the epoch budget ends first. ``started``: the
        clock reading that ``progress.seconds`` counts from."""
        training, progress = self.training, self.progress
        for _ in range(training.gradient_accumulation):
            with self.state.timed("data"):
                position, indices = next(batches)
                if training.max_epochs is not None and position.epoch >= training.max_epochs:
                    progress.stop_reason = "max_epochs"
                    return False
                batch = self.train_split.batch(indices)
            self._train_on(batch)
            progress.epoch, progress.step_in_epoch = position.epoch, position.step_in_epoch
        progress.step += 1
        self._account_update(time.perf_counter() - started)
        return True

    def _train_on(self, batch: Batch) -> None:
        state, progress, rows = self.state, self.progress, self.rows
        # Dropout masks depend only on (seed, rank, batch number): resuming redraws them.
        seed_generator(state.device, hash((self.training.seed, state.rank, progress.micro_batches)) & (2**62 - 1))
        host = (batch.src, batch.tgt_in, batch.tgt_out)
        if state.device.type == "cuda":  # a copy from pinned memory is asynchronous; from pageable memory it waits
            host = tuple(t.pin_memory() for t in host)
        src, tgt_in, tgt_out = (t.to(state.device, non_blocking=True) for t in host)
        with state.precision():
            loss, nll = translation_loss(state.model, src, tgt_in, tgt_out, progress.step,
                                         self.training.label_smoothing, self.pad_id)
        tokens = max(1, batch.target_tokens)
        self.engine.backward(loss / tokens)
        if self.engine.is_gradient_accumulation_boundary():
            if self.clips:  # the norm, on the device, clips and is logged
                rows.grad_norm = torch.nn.utils.clip_grad_norm_(state.model.parameters(),
                                                                self.training.gradient_clipping, foreach=True)
            elif self.engine.zero_optimization_stage() == 0 and (progress.step + 1) % self.training.log_every == 0:
                # Not clipped here: the norm only before an update whose row is logged.
                # Under ZeRO DeepSpeed computes it (get_global_grad_norm).
                rows.grad_norm = _grad_norm(state.model)
        self.engine.step()
        progress.micro_batches += 1
        rows.add_batch(tokens=batch.target_tokens, src_tokens=int(batch.src_lengths.sum()),
                       flops=self._counted_flops(batch, projects_source(state.model, progress.step)),
                       loss=loss.detach(), nll=nll.detach())

    def _counted_flops(self, batch: Batch, source_logits: bool) -> int:
        """The batch's counted training FLOPs, each sentence's from its length pair
        (``source_logits``: what translation_loss computed)."""
        pairs = collections.Counter(zip(batch.src_lengths.tolist(), batch.tgt_lengths.tolist()))
        total = 0
        for (src, tgt), sentences in pairs.items():
            key = (src, tgt, source_logits)
            if key not in self.flops_of_pair:
                self.flops_of_pair[key] = training_flops(self.state.model, src, tgt, source_logits)
            total += sentences * self.flops_of_pair[key]
        return total

    def _account_update(self, elapsed: float) -> None:
        """Sum this update's counts over the workers, into the run's totals and the rows."""
        progress, rows = self.progress, self.rows
        # With the counts, whether a SIGTERM reached any worker: all stop after this update.
        tokens, src_tokens, flops, seconds, sigterms = self.state.all_reduce(
            [rows.tokens, rows.src_tokens, rows.flops, elapsed, float(preemption.REQUESTED.is_set())])
        self.preempt = sigterms > 0
        progress.train_tokens += int(tokens)
        progress.train_src_tokens += int(src_tokens)
        progress.train_flops += flops
        interval = max(1e-9, seconds / self.state.world - progress.seconds)
        progress.seconds = seconds / self.state.world
        progress.time_spent_in_seconds = sum(progress.time_spent.values())
        # fp16: DeepSpeed skips the update whose gradients overflowed, and counts it
        # (the count is saved in its checkpoints, so it survives a resume).
        progress.skipped_updates = int(self.engine.skipped_steps)
        rows.after_update(tokens, flops, interval)


def _grad_norm(model: torch.nn.Module) -> torch.Tensor:
    """The global L2 norm of the gradients, left on the device until it is logged."""
    grads = [p.grad for p in model.parameters() if p.grad is not None]
    return torch.linalg.vector_norm(torch.stack(torch._foreach_norm(grads)).float())


def seed_generator(device: torch.device, seed: int) -> None:
    """Seed the random generator that ``device``'s dropout draws from, as
    ``torch.manual_seed`` would: the CPU's, and on a GPU that device's too. Not
    ``torch.manual_seed`` itself, which also queues a seeding of every GPU (with a
    formatted stack, where CUDA has not started) and of other backends: 162 us a call on a
    CPU against 2 us (benchmarks/reports/2026-11-29_train_step_and_reseed_xeon_amx.md),
    paid at every batch."""
    torch.default_generator.manual_seed(seed)
    if device.type == "cuda":
        torch.cuda.default_generators[device.index if device.index is not None else torch.cuda.current_device()
                                      ].manual_seed(seed)
