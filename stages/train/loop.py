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

What a worker does before the loop (device, data, engine, restoring a checkpoint) is
``bootstrap.py``; checkpoints are ``checkpointer.py``; the bar is ``budget_bar.py``.
"""

from __future__ import annotations

import collections
import contextlib
import functools
import math
import time

import torch
import torch.distributed as dist

from pipeline.core.timeline import mark
from stages.train import checkpointer, preemption
from stages.train.batching import batches_from, token_batches
from stages.train.budget_bar import BudgetBar
from stages.train.config import TrainStageConfig
from stages.train.data import Batch, TokenizedSplit
from stages.train.deepspeed_config import bf16_autocast, loop_clips
from stages.train.engine import compiled_graphs
from stages.shared.models.flops import projects_source, training_flops
from stages.shared.models.loss import translation_loss
from stages.train.progress import STABLE_PHASE_END, TrainingProgress, budget_reached


def _timed(part: str):
    """A method whose wall time is added to the run's ``time_spent[part]``: where a run's
    time goes besides its updates (train_report.json's ``seconds_<part>``). On a GPU the
    host time of ``logging`` (it reads the losses back) includes waiting for the device."""
    def wrap(method):
        @functools.wraps(method)
        def timed(self, *args, **kwargs):
            started = time.perf_counter()
            try:
                return method(self, *args, **kwargs)
            finally:
                self._spend(part, started)
        return timed
    return wrap


class TrainLoop:
    def __init__(self, engine, config: TrainStageConfig, facts: dict, train_split: TokenizedSplit,
                 valid_split: TokenizedSplit, rank: int, world: int, progress: TrainingProgress,
                 history: list[dict], best: dict | None, session, run_dir: str, filesystem,
                 metrics_sink=None, bleu=None):
        self.engine, self.model, self.config, self.training = engine, engine.module, config, config.train
        self.pad_id = facts["special_ids"]["pad"]
        self.train_split, self.valid_split = train_split, valid_split
        self.rank, self.world = rank, world
        self.progress, self.history, self.best = progress, history, best
        precision = progress.hardware["precision"]
        self.autocast = bf16_autocast(precision)
        self.clips = loop_clips(self.training, precision)  # else DeepSpeed clips, if anything
        self.device = engine.device
        # Counted FLOPs per (source length, target length, source logits): a batch has
        # hundreds of sentences but few distinct length pairs.
        self.flops_of_pair: dict[tuple[int, int, bool], int] = {}
        self.window = _Window()
        self.window.resume_rows(progress.log_window, rank)
        self.metrics_sink = metrics_sink  # rank 0's live MLflow logging, when tracked
        self.bleu = bleu  # validation_bleu.BleuValidator, when train.valid_bleu_every is set
        self.session = session  # where its checkpoints go (session.py)
        self.run_dir, self.filesystem = run_dir, filesystem  # where its snapshots go, beside them
        self.preempt = False  # a worker got SIGTERM: stop after this update (preemption.py)

    def _record(self, row: dict) -> None:
        """A logged row: kept for the checkpoint's history and sent to the tracker now.
        A resumed run sends the rows after its checkpoint again, under the same steps."""
        self.history.append(row)
        if self.metrics_sink is not None:
            self.metrics_sink([row])

    def run(self) -> None:
        progress = self.progress
        if progress.stop_reason and progress.last_checkpoint_step == progress.step:
            return  # restored from the final checkpoint of a finished run: nothing left to do
        preemption.TRAINING.set()  # from here a SIGTERM stops the run at an update's end
        try:
            self._run()
        finally:
            preemption.TRAINING.clear()
        if self.metrics_sink is not None:  # the curve complete in the tracker before the stage ends
            self.metrics_sink.drain()

    def _run(self) -> None:
        training, progress = self.training, self.progress
        bar = self._progress_bar()
        bar.show(progress)  # a resumed run starts where it left off
        started = time.perf_counter() - progress.seconds
        batches = batches_from(progress.position, self.train_split.src_lengths, self.train_split.tgt_lengths,
                               training.max_tokens, training.seed, self.rank, self.world)
        self.model.train()
        self._validations_due()  # a run preempted right after an update, before it validated
        progress.stop_reason = self._stop_reason()
        first = True
        while not progress.stop_reason:
            if not self.train_update(batches, started):
                break
            if self.rank == 0:
                if first:
                    mark(f"train/{self.config.model.name}", "first update")
                    first = False
                # Each update, where marks are on: benchmarks count the updates a fault cost.
                mark(f"train/{self.config.model.name}", f"update {progress.step}")
            bar.show(progress)
            if self.preempt:
                bar.close()
                self._stop_preempted()
            self._validations_due()
            progress.stop_reason = self._stop_reason()
            if progress.step % training.checkpoint_every == 0 and not progress.stop_reason:
                if self._resumable_due():
                    self._checkpoint()
                else:
                    self._snapshot()
        bar.close()
        if self.rank == 0:
            mark(f"train/{self.config.model.name}", "last update")
        # The end of a run is always validated and checkpointed: the final model and
        # the stop reason are read from that last checkpoint.
        if progress.last_valid_step != progress.step:
            self._validate()
        if self.bleu is not None and progress.last_bleu_step != progress.step:
            self._validate_bleu()
        if self.rank == 0:
            mark(f"train/{self.config.model.name}", "validated")
        if training.compile:  # after the last validation, which may be the first to compile its graph
            progress.hardware["compiled_graphs"] = compiled_graphs()
        self._checkpoint()
        if self.rank == 0:
            mark(f"train/{self.config.model.name}", "checkpointed")

    def _validations_due(self) -> None:
        training, progress = self.training, self.progress
        if progress.step and progress.step % training.valid_every == 0 and progress.last_valid_step != progress.step:
            self._validate()
        if (self.bleu is not None and progress.step and progress.step % training.valid_bleu_every == 0
                and progress.last_bleu_step != progress.step):
            self._validate_bleu()

    def _stop_preempted(self) -> None:
        """A worker got SIGTERM (all agreed on it after this update): checkpoint this
        update and stop; the run resumes from it."""
        progress = self.progress
        if progress.last_checkpoint_step != progress.step:
            progress.preempted = True
            self._checkpoint()
            progress.preempted = False
        if self.rank == 0:
            mark(f"train/{self.config.model.name}", "preemption checkpointed")
        raise preemption.Preempted(f"train {self.config.model.name!r}: SIGTERM; stopped after update "
                                   f"{progress.step} with a complete checkpoint of it, which the next attempt "
                                   "resumes from")

    def _stop_reason(self) -> str:
        """The budget used up, or, in a stable-phase segment, the decay's start: the rate
        DeepSpeed set for the next update is below the peak once the warmup is over
        (schedule.py returns the peak itself until the decay begins)."""
        reason = budget_reached(self.training, self.progress)
        if (not reason and self.config.until_decay and self.progress.step >= self.training.warmup_steps
                and self.engine.get_lr()[0] < self.training.lr):
            reason = STABLE_PHASE_END
        return reason

    def _progress_bar(self) -> BudgetBar:
        """Rank 0's bar, drawn on the driver by Ray, in updates (budget_bar.py)."""
        if self.rank != 0:
            return BudgetBar("", self.training, 0, enabled=False)
        per_epoch = len(token_batches(self.train_split.src_lengths, self.train_split.tgt_lengths,
                                      self.training.max_tokens, self.training.seed, 0)) // self.world
        return BudgetBar(f"train {self.config.model.name}", self.training, per_epoch, enabled=True)

    def train_update(self, batches, started: float) -> bool:
        """One optimizer update over ``gradient_accumulation`` batches, and its accounting.
        False, with nothing trained, when the epoch budget ends first. ``started``: the
        clock reading that ``progress.seconds`` counts from."""
        training, progress = self.training, self.progress
        for _ in range(training.gradient_accumulation):
            fetching = time.perf_counter()
            position, indices = next(batches)
            if training.max_epochs is not None and position.epoch >= training.max_epochs:
                progress.stop_reason = "max_epochs"
                return False
            batch = self.train_split.batch(indices)
            self._spend("data", fetching)
            self._train_on(batch)
            progress.epoch, progress.step_in_epoch = position.epoch, position.step_in_epoch
        progress.step += 1
        self._account_update(time.perf_counter() - started)
        return True

    def _spend(self, part: str, started: float) -> None:
        spent = self.progress.time_spent
        spent[part] = spent.get(part, 0.0) + time.perf_counter() - started

    # ------------------------------------------------------------------ one batch

    def _train_on(self, batch: Batch) -> None:
        progress = self.progress
        # Dropout masks depend only on (seed, rank, batch number): resuming redraws them.
        seed_generator(self.device, hash((self.training.seed, self.rank, progress.micro_batches)) & (2**62 - 1))
        host = (batch.src, batch.tgt_in, batch.tgt_out)
        if self.device.type == "cuda":  # a copy from pinned memory is asynchronous; from pageable memory it waits
            host = tuple(t.pin_memory() for t in host)
        src, tgt_in, tgt_out = (t.to(self.device, non_blocking=True) for t in host)
        with self._precision():
            loss, nll = translation_loss(self.model, src, tgt_in, tgt_out, progress.step,
                                         self.training.label_smoothing, self.pad_id)
        tokens = max(1, batch.target_tokens)
        self.engine.backward(loss / tokens)
        if self.engine.is_gradient_accumulation_boundary():
            if self.clips:  # the norm, on the device, clips and is logged
                self.window.grad_norm = torch.nn.utils.clip_grad_norm_(self.model.parameters(),
                                                                       self.training.gradient_clipping, foreach=True)
            elif self.engine.zero_optimization_stage() == 0 and (progress.step + 1) % self.training.log_every == 0:
                # Not clipped here: the norm only before an update whose row is logged.
                # Under ZeRO DeepSpeed computes it (get_global_grad_norm).
                self.window.grad_norm = _grad_norm(self.model)
        self.engine.step()
        progress.micro_batches += 1
        self.window.add(tokens=batch.target_tokens, src_tokens=int(batch.src_lengths.sum()),
                        flops=self._counted_flops(batch, projects_source(self.model, progress.step)),
                        loss=loss.detach(), nll=nll.detach())

    def _counted_flops(self, batch: Batch, source_logits: bool) -> int:
        """The batch's counted training FLOPs, each sentence's from its length pair
        (``source_logits``: what translation_loss computed)."""
        pairs = collections.Counter(zip(batch.src_lengths.tolist(), batch.tgt_lengths.tolist()))
        total = 0
        for (src, tgt), sentences in pairs.items():
            key = (src, tgt, source_logits)
            if key not in self.flops_of_pair:
                self.flops_of_pair[key] = training_flops(self.model, src, tgt, source_logits)
            total += sentences * self.flops_of_pair[key]
        return total

    def _precision(self):
        if self.autocast:
            return torch.autocast(self.device.type, dtype=torch.bfloat16)
        return contextlib.nullcontext()

    # ------------------------------------------------------------------ after an update

    def _account_update(self, elapsed: float) -> None:
        """Sum this update's counts over the workers and log a row every ``log_every``."""
        progress, training = self.progress, self.training
        # With the counts, whether a SIGTERM reached any worker: all stop after this update.
        tokens, src_tokens, flops, seconds, sigterms = _all_reduce(
            [self.window.tokens, self.window.src_tokens, self.window.flops, elapsed,
             float(preemption.REQUESTED.is_set())], self.world, self.device)
        self.preempt = sigterms > 0
        progress.train_tokens += int(tokens)
        progress.train_src_tokens += int(src_tokens)
        progress.train_flops += flops
        interval = max(1e-9, seconds / self.world - progress.seconds)
        progress.seconds = seconds / self.world
        progress.time_spent_in_seconds = sum(progress.time_spent.values())
        self.window.rows_tokens += tokens
        self.window.rows_flops += flops
        self.window.rows_seconds += interval
        self.window.rows_loss = self.window.rows_loss + self.window.loss
        self.window.rows_nll = self.window.rows_nll + self.window.nll
        # fp16: DeepSpeed skips the update whose gradients overflowed, and counts it
        # (the count is saved in its checkpoints, so it survives a resume).
        progress.skipped_updates = int(self.engine.skipped_steps)
        grad_norm = self.window.grad_norm
        if grad_norm is None:
            grad_norm = self.engine.get_global_grad_norm()
        self.window.reset_step()
        if progress.step % training.log_every == 0:
            self._log_row(grad_norm)

    @_timed("logging")
    def _log_row(self, grad_norm) -> None:
        window, progress = self.window, self.progress
        tokens = max(window.rows_tokens, 1.0)
        loss, nll = _all_reduce([window.rows_loss, window.rows_nll], self.world, self.device)
        flops_per_second = window.rows_flops / window.rows_seconds
        row = {"step": progress.step, "epoch": progress.epoch, "train_loss": loss / tokens,
               "train_nll": nll / tokens, "train_ppl": math.exp(min(nll / tokens, 50)),
               "lr": self.engine.get_lr()[0], "tokens_per_second": window.rows_tokens / window.rows_seconds,
               "train_tokens": progress.train_tokens, "train_flops": progress.train_flops,
               "flops_per_second": flops_per_second, "train_seconds": progress.seconds}
        if grad_norm is not None:
            row["grad_norm"] = float(grad_norm)
        row["mfu"] = flops_per_second / self.progress.hardware["peak_flops_total"]
        if progress.hardware.get("precision") == "fp16":
            row["skipped_updates"] = progress.skipped_updates
            row["loss_scale"] = float(self.engine.optimizer.loss_scale)
        self._record(row)
        window.reset_rows()

    @_timed("validation")
    def _validate(self) -> None:
        """Loss and perplexity on the valid split: each worker a share, summed."""
        progress = self.progress
        batches = token_batches(self.valid_split.src_lengths, self.valid_split.tgt_lengths, self.training.max_tokens,
                                seed=0, epoch=0)[self.rank::self.world]
        self.model.eval()
        nll_sum, tokens = 0.0, 0
        with torch.no_grad(), self._precision():
            for indices in batches:
                batch = self.valid_split.batch(indices)
                src, tgt_in, tgt_out = (t.to(self.device) for t in (batch.src, batch.tgt_in, batch.tgt_out))
                nll_sum = nll_sum + translation_loss(self.model, src, tgt_in, tgt_out, 10**9, 0.0, self.pad_id)[1]
                tokens += batch.target_tokens
        self.model.train()
        nll_sum, tokens = _all_reduce([nll_sum, float(tokens)], self.world, self.device)
        valid_loss = nll_sum / max(tokens, 1.0)
        progress.last_valid_step = progress.step
        improved = valid_loss < progress.best_valid_loss
        if improved:
            progress.best_valid_loss = valid_loss
        self._judge("valid_loss", improved)
        self._record({"step": progress.step, "valid_loss": valid_loss,
                      "valid_ppl": math.exp(min(valid_loss, 50)), "train_seconds": progress.seconds,
                      "train_flops": progress.train_flops, "train_tokens": progress.train_tokens})

    @_timed("validation")
    def _validate_bleu(self) -> None:
        """BLEU and chrF on the valid split and a fixed sample of training pairs."""
        progress = self.progress
        scores = self.bleu(self.model)  # in the faster of the run's precision and fp32, measured
        self.model.train()
        progress.hardware["bleu_decode_precision"] = self.bleu.precision
        for precision, seconds in self.bleu.probe_seconds.items():  # what the choice was made on
            progress.hardware[f"bleu_probe_seconds_{precision}"] = seconds
        progress.last_bleu_step = progress.step
        improved = progress.best_valid_bleu is None or scores["valid_bleu"] > progress.best_valid_bleu
        if improved:
            progress.best_valid_bleu = scores["valid_bleu"]
        self._judge("valid_bleu", improved)
        self._record({"step": progress.step, **scores, "train_seconds": progress.seconds,
                      "train_flops": progress.train_flops, "train_tokens": progress.train_tokens})

    def _judge(self, metric: str, improved: bool) -> None:
        """Keep the best weights and count validations without improvement, for the
        metric that ``train.best_metric`` names (the other is only logged)."""
        if metric != self.training.best_metric:
            return
        progress = self.progress
        if improved:
            progress.best_step = progress.step
            progress.validations_without_improvement = 0
            self.best = checkpointer.rank0_weights(self.engine, self.rank)  # every rank joins ZeRO-3's gather
        else:
            progress.validations_without_improvement += 1

    def _resumable_due(self) -> bool:
        """Whether this update's checkpoint is a resumable one (``train.resume_every``
        updates or more after the last) rather than a weights-only snapshot."""
        every = self.training.resume_every
        return every is None or self.progress.step - max(self.progress.last_checkpoint_step, 0) >= every

    @_timed("checkpoints")
    def _snapshot(self) -> None:
        checkpointer.save_snapshot(self.engine, self.rank, self.progress, self.run_dir, self.filesystem,
                                   self.training.keep_checkpoints)

    @_timed("checkpoints")
    def _checkpoint(self) -> None:
        window = self.window
        loss, nll = _all_reduce([window.rows_loss, window.rows_nll], self.world, self.device)
        self.progress.log_window = {} if not window.rows_tokens else {
            "tokens": window.rows_tokens, "flops": window.rows_flops, "seconds": window.rows_seconds,
            "loss": loss, "nll": nll}
        checkpointer.save(self.engine, self.rank, self.progress, self.history, self.best, self.session)


class _Window:
    """Sums since the last update (this worker) and since the last logged row: counts
    summed over all workers, losses this worker's (device tensors, reduced when logged)."""

    def __init__(self):
        self.reset_step()
        self.reset_rows()

    def reset_step(self) -> None:
        self.tokens = self.src_tokens = self.flops = self.loss = self.nll = 0.0
        self.grad_norm = None

    def reset_rows(self) -> None:
        self.rows_tokens = self.rows_flops = self.rows_seconds = self.rows_loss = self.rows_nll = 0.0

    def resume_rows(self, saved: dict, rank: int) -> None:
        """The sums a checkpoint saved (``TrainingProgress.log_window``). Its losses are
        summed over the workers already: rank 0 holds them, as the next row sums them again."""
        if saved:
            self.rows_tokens, self.rows_flops, self.rows_seconds = saved["tokens"], saved["flops"], saved["seconds"]
            if rank == 0:
                self.rows_loss, self.rows_nll = saved["loss"], saved["nll"]

    def add(self, tokens: int, src_tokens: int, flops: float, loss: float, nll: float) -> None:
        self.tokens += tokens
        self.src_tokens += src_tokens
        self.flops += flops
        self.loss += loss
        self.nll += nll


def _all_reduce(values: list, world: int, device) -> list[float]:
    """``values`` (numbers, or one-element tensors on ``device``) summed over the workers,
    read back in one copy. The tensor lives on the worker's device: NCCL reduces CUDA
    tensors only, gloo CPU ones."""
    if world == 1 or not dist.is_initialized():
        return [float(v) for v in values]
    tensor = torch.stack([torch.as_tensor(v, dtype=torch.float64, device=device).reshape(()) for v in values])
    dist.all_reduce(tensor)
    return tensor.tolist()


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
