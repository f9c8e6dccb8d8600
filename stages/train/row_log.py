"""The loop's training rows: the counts of each update summed since the last logged row,
and a row every ``train.log_every`` updates (loss, perplexity, rate, throughput, FLOPs,
gradient norm, MFU). Losses stay on the device until a row reads them."""

from __future__ import annotations

import math

from stages.train.loop_state import LoopState


class RowLog:
    """Sums since the last update (this worker's) and since the last logged row: counts
    summed over all workers, losses this worker's (device tensors, reduced when logged)."""

    def __init__(self, state: LoopState, log_every: int, saved: dict):
        self.state, self.log_every = state, log_every
        self.reset_update()
        self.reset_rows()
        # The sums a checkpoint saved (``TrainingProgress.log_window``). Its losses are
        # summed over the workers already: rank 0 holds them, as the next row sums them again.
        if saved:
            self.rows_tokens, self.rows_flops, self.rows_seconds = saved["tokens"], saved["flops"], saved["seconds"]
            if state.rank == 0:
                self.rows_loss, self.rows_nll = saved["loss"], saved["nll"]

    def reset_update(self) -> None:
        self.tokens = self.src_tokens = self.flops = self.loss = self.nll = 0.0
        self.grad_norm = None  # the gradient norm, where this update computed it (on the device)

    def reset_rows(self) -> None:
        self.rows_tokens = self.rows_flops = self.rows_seconds = self.rows_loss = self.rows_nll = 0.0

    def add_batch(self, tokens: int, src_tokens: int, flops: float, loss, nll) -> None:
        self.tokens += tokens
        self.src_tokens += src_tokens
        self.flops += flops
        self.loss += loss
        self.nll += nll

    def after_update(self, tokens: float, flops: float, seconds: float) -> None:
        """The update's counts summed over the workers, and the seconds it took; a row
        every ``log_every`` updates."""
        self.rows_tokens += tokens
        self.rows_flops += flops
        self.rows_seconds += seconds
        self.rows_loss = self.rows_loss + self.loss
        self.rows_nll = self.rows_nll + self.nll
        grad_norm = self.grad_norm
        if grad_norm is None:
            grad_norm = self.state.engine.get_global_grad_norm()
        self.reset_update()
        if self.state.progress.step % self.log_every == 0:
            with self.state.timed("logging"):
                self._log_row(grad_norm)

    def saved(self) -> dict:
        """The sums since the last row, for a checkpoint (its losses summed over the workers)."""
        loss, nll = self.state.all_reduce([self.rows_loss, self.rows_nll])
        return {} if not self.rows_tokens else {"tokens": self.rows_tokens, "flops": self.rows_flops,
                                                "seconds": self.rows_seconds, "loss": loss, "nll": nll}

    def _log_row(self, grad_norm) -> None:
        state, progress = self.state, self.state.progress
        tokens = max(self.rows_tokens, 1.0)
        loss, nll = state.all_reduce([self.rows_loss, self.rows_nll])
        flops_per_second = self.rows_flops / self.rows_seconds
        row = {"step": progress.step, "epoch": progress.epoch, "train_loss": loss / tokens,
               "train_nll": nll / tokens, "train_ppl": math.exp(min(nll / tokens, 50)),
               "lr": state.engine.get_lr()[0], "tokens_per_second": self.rows_tokens / self.rows_seconds,
               "train_tokens": progress.train_tokens, "train_flops": progress.train_flops,
               "flops_per_second": flops_per_second, "train_seconds": progress.seconds}
        if grad_norm is not None:
            row["grad_norm"] = float(grad_norm)
        row["mfu"] = flops_per_second / progress.hardware["peak_flops_total"]
        if progress.hardware.get("precision") == "fp16":
            row["skipped_updates"] = progress.skipped_updates
            row["loss_scale"] = float(state.engine.optimizer.loss_scale)
        state.curve.record(row)
        self.reset_rows()
