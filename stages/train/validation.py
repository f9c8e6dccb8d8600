"""The loop's validations, each deciding for itself when it runs: the loss on the valid
split every ``train.valid_every`` updates, BLEU and chrF every ``train.valid_bleu_every``
(``validation_bleu.py``), and both at the end of a run (its final model is validated).
``BestWeights`` keeps the best weights by ``train.best_metric``."""

from __future__ import annotations

import math

import torch

from stages.shared.models.loss import translation_loss
from stages.train import checkpointer
from stages.train.batching import token_batches
from stages.train.data import TokenizedSplit
from stages.train.loop_state import LoopState


class BestWeights:
    """The best validated weights by ``metric`` (``train.best_metric``) and the
    validations since they improved, which early stopping reads (progress.py)."""

    def __init__(self, state: LoopState, metric: str, weights: dict | None):
        self.state, self.metric, self.weights = state, metric, weights

    def judge(self, metric: str, improved: bool) -> None:
        """A validation of ``metric`` ended; the other metric is only logged."""
        if metric != self.metric:
            return
        progress = self.state.progress
        if improved:
            progress.best_step = progress.step
            progress.validations_without_improvement = 0
            # Every rank joins ZeRO-3's gather.
            self.weights = checkpointer.rank0_weights(self.state.engine, self.state.rank)
        else:
            progress.validations_without_improvement += 1


class Periodic:
    """A validation every ``every`` updates and at the end of the run, never twice at one
    update (a resumed run may have validated the update it resumes at)."""

    def __init__(self, state: LoopState, every: int):
        self.state, self.every = state, every

    def last_step(self) -> int:
        """The update this validation last ran at (recorded in the run's progress)."""
        raise NotImplementedError

    def validate(self) -> None:
        raise NotImplementedError

    def after_update(self) -> None:
        step = self.state.progress.step
        if step and step % self.every == 0 and self.last_step() != step:
            self.validate()

    def at_end(self) -> None:
        if self.last_step() != self.state.progress.step:
            self.validate()


class LossValidation(Periodic):
    """Loss and perplexity on the valid split: each worker a share, summed."""

    def __init__(self, state: LoopState, split: TokenizedSplit, max_tokens: int, pad_id: int, every: int,
                 best: BestWeights):
        super().__init__(state, every)
        self.split, self.max_tokens, self.pad_id, self.best = split, max_tokens, pad_id, best

    def last_step(self) -> int:
        return self.state.progress.last_valid_step

    def validate(self) -> None:
        state, progress = self.state, self.state.progress
        with state.timed("validation"):
            batches = token_batches(self.split.src_lengths, self.split.tgt_lengths, self.max_tokens, seed=0,
                                    epoch=0)[state.rank::state.world]
            state.model.eval()
            nll_sum, tokens = 0.0, 0
            with torch.no_grad(), state.precision():
                for indices in batches:
                    batch = self.split.batch(indices)
                    src, tgt_in, tgt_out = (t.to(state.device) for t in (batch.src, batch.tgt_in, batch.tgt_out))
                    nll_sum = nll_sum + translation_loss(state.model, src, tgt_in, tgt_out, 10**9, 0.0,
                                                         self.pad_id)[1]
                    tokens += batch.target_tokens
            state.model.train()
            nll_sum, tokens = state.all_reduce([nll_sum, float(tokens)])
            valid_loss = nll_sum / max(tokens, 1.0)
            progress.last_valid_step = progress.step
            improved = valid_loss < progress.best_valid_loss
            if improved:
                progress.best_valid_loss = valid_loss
            self.best.judge("valid_loss", improved)
            state.curve.record({"step": progress.step, "valid_loss": valid_loss,
                                "valid_ppl": math.exp(min(valid_loss, 50)), "train_seconds": progress.seconds,
                                "train_flops": progress.train_flops, "train_tokens": progress.train_tokens})


class BleuValidation(Periodic):
    """BLEU and chrF on the valid split and a fixed sample of training pairs, decoded by
    ``validator`` (validation_bleu.BleuValidator)."""

    def __init__(self, state: LoopState, validator, every: int, best: BestWeights):
        super().__init__(state, every)
        self.validator, self.best = validator, best

    def last_step(self) -> int:
        return self.state.progress.last_bleu_step

    def validate(self) -> None:
        state, progress = self.state, self.state.progress
        with state.timed("validation"):
            scores = self.validator(state.model)  # in the faster of the run's precision and fp32, measured
            state.model.train()
            progress.hardware["bleu_decode_precision"] = self.validator.precision
            for precision, seconds in self.validator.probe_seconds.items():  # what the choice was made on
                progress.hardware[f"bleu_probe_seconds_{precision}"] = seconds
            progress.last_bleu_step = progress.step
            improved = progress.best_valid_bleu is None or scores["valid_bleu"] > progress.best_valid_bleu
            if improved:
                progress.best_valid_bleu = scores["valid_bleu"]
            self.best.judge("valid_bleu", improved)
            state.curve.record({"step": progress.step, **scores, "train_seconds": progress.seconds,
                                "train_flops": progress.train_flops, "train_tokens": progress.train_tokens})
