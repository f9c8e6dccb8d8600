"""The train stage's config: the shared train section, one model's spec, and the
slice a train stage is keyed on (the model plus the train section with its overrides)."""

from __future__ import annotations

import math
from typing import Any, ClassVar, Literal

from pydantic import Field, model_validator

from pipeline.core.hardware import Precision
from pipeline.core.section import Section
from stages.shared.models.families import family
from stages.shared.models.spec import ModelSpec


# The rule every fraction of the run shares, named in its error.
NEEDS_A_PLAN = ("is a share of the run's planned updates, which only max_steps, max_epochs, max_train_tokens or "
                "max_train_flops can plan (not max_wall_time)")


class TrainConfig(Section):
    """How every model is trained: one section, so the comparison is like for like.

    Defaults follow Vaswani et al. (2017), section 5: Adam (0.9, 0.98, 1e-9), the
    inverse-square-root schedule with 4000 warmup steps, label smoothing 0.1. A run
    stops at the first budget it reaches; at least one must be set.
    """

    # How the run is spread out or how often it can resume, not what it trains: not in
    # artifact keys.
    NOT_IN_KEY: ClassVar[frozenset[str]] = frozenset({"in_process", "gpus_per_worker", "resume_every"})

    # Ray Train workers, each with one DeepSpeed engine (data parallel).
    workers: int = Field(default=1, gt=0)
    # A run of one CPU worker trains in the train stage's own process instead of a Ray
    # Train worker group: the same updates, without the processes Ray Train starts per
    # stage (stages/train/in_process.py). Runs on GPUs or several workers use Ray Train.
    in_process: bool = False
    use_gpu: bool = False  # a GPU per worker (gpus_per_worker), NCCL between them
    # The share of a GPU each worker asks Ray for: 0.125 lets eight runs of small models
    # (a frontier study's sizes) train on one GPU at once, each in its own process; Ray
    # and the runner's admission count the fractions. Below 1 only for runs of one worker:
    # NCCL cannot join two workers on one GPU.
    gpus_per_worker: float = Field(default=1.0, gt=0, le=1)
    cpus_per_worker: int = Field(default=1, gt=0)  # CPUs Ray reserves for each worker
    # How Ray places the workers on nodes: PACK fills a node first; SPREAD and
    # STRICT_SPREAD put them on different nodes (STRICT: or wait until there are enough).
    placement_strategy: Literal["PACK", "SPREAD", "STRICT_PACK", "STRICT_SPREAD"] = "PACK"
    # torch threads per worker, at most cpus_per_worker (more would oversubscribe the
    # CPUs Ray gave the worker); default: cpus_per_worker.
    threads_per_worker: int | None = Field(default=None, gt=0)
    # auto: what the worker's device runs fast (pipeline/core/hardware.py): bf16 on GPUs that
    # have it and on CPUs with AMX or AVX512-BF16, fp16 on older GPUs, else fp32.
    # bf16 is torch.autocast over fp32 weights, on a CPU as on a GPU; fp16 is DeepSpeed's mode, GPU only.
    precision: Precision = "auto"
    # DeepSpeed ZeRO: 1 shards the optimizer states, 2 also the gradients, 3 also the weights.
    zero_stage: int = Field(default=0, ge=0, le=3)
    # torch.compile the model's forward, one graph for every batch shape (dynamic shapes:
    # stages/train/engine.py). Pays a compilation for training and one for validation at
    # the start of each run (train_report.json's compiled_graphs counts them); no faster
    # than eager on the CPUs measured (docs/hardware.md). Refused for rnn and convs2s.
    compile: bool = False
    # Tokens per batch and side on each worker (padded: sentences x longest); the paper
    # used about 25,000 per side over 8 GPUs.
    max_tokens: int = Field(default=4096, gt=0)
    gradient_accumulation: int = Field(default=1, gt=0)  # batches per optimizer update
    gradient_clipping: float = Field(default=0.0, ge=0.0)  # 0: none, as in the paper
    label_smoothing: float = Field(default=0.1, ge=0.0, lt=1.0)  # epsilon_ls of section 5.4

    optimizer: Literal["adam", "adamw"] = "adam"  # torch's fused implementation
    betas: tuple[float, float] = (0.9, 0.98)  # Adam's beta1, beta2
    eps: float = Field(default=1e-9, gt=0.0)  # Adam's epsilon
    weight_decay: float = Field(default=0.0, ge=0.0)  # decoupled with adamw, L2 with adam
    # noam: lr = lr_scale * d_model^-0.5 * min(step^-0.5, step * warmup^-1.5) (section 5.3);
    # cosine: linear warmup to lr, cosine decay to min_lr at the end of the budget
    # (max_steps, max_train_flops or max_train_tokens, whichever is spent first);
    # constant: linear warmup to lr, then lr (the RNN recipes' plain Adam);
    # wsd: warmup-stable-decay (Hagele et al. 2024): linear warmup to lr, lr until the
    # last decay_fraction of the budget, then down to min_lr at its end. Its stable
    # phase does not depend on the budget, so budgets can branch from one run
    # (branch_budgets: docs/comparing.md).
    schedule: Literal["noam", "cosine", "constant", "wsd"] = "noam"
    lr: float = Field(default=5e-4, gt=0.0)  # peak learning rate of cosine, constant and wsd
    lr_scale: float = Field(default=1.0, gt=0.0)  # factor of the noam schedule
    min_lr: float = Field(default=0.0, ge=0.0)  # where cosine and wsd end
    # wsd: the share of the budget its decay takes.
    decay_fraction: float = Field(default=0.2, gt=0, lt=1)
    # wsd: the decay's shape: 1-sqrt, lr * (1 - sqrt(progress)), the best of Hagele et
    # al.'s cooldowns, or linear.
    decay_shape: Literal["1-sqrt", "linear"] = "1-sqrt"
    warmup_steps: int = Field(default=4000, ge=0)  # updates of warmup, every schedule
    # Or the warmup as a share of the run's planned updates (stages/train/plan.py), so
    # that every budget of a sweep warms up for the same share of its run.
    warmup_fraction: float | None = Field(default=None, gt=0, lt=1)

    # Budgets: whichever comes first.
    max_steps: int | None = Field(default=None, gt=0)
    max_epochs: int | None = Field(default=None, gt=0)  # passes over the training split
    max_train_tokens: int | None = Field(default=None, gt=0)  # target tokens, all workers
    max_train_flops: float | None = Field(default=None, gt=0)  # counted, stages/shared/models/flops.py
    max_wall_time: float | None = Field(default=None, gt=0)  # seconds of training

    valid_every: int = Field(default=1000, gt=0)  # steps
    # Validation BLEU: every N updates, decode the valid split (the first
    # valid_bleu_sentences of it, or all) and a fixed random subset of train_bleu_sentences
    # training pairs, and score both with sacreBLEU (BLEU and chrF). null: off.
    valid_bleu_every: int | None = Field(default=None, gt=0)
    valid_bleu_sentences: int | None = Field(default=None, gt=0)  # the first N valid sentences; null: all
    train_bleu_sentences: int = Field(default=500, ge=0)  # training pairs decoded beside them (0: none)
    valid_bleu_beam: int = Field(default=1, gt=0)  # 1: greedy
    valid_bleu_batch_size: int = Field(default=64, gt=0)  # sentences per decoding batch
    # What picks best.pt and what early stopping watches: the valid loss (every
    # valid_every updates) or the valid BLEU (every valid_bleu_every updates).
    best_metric: Literal["valid_loss", "valid_bleu"] = "valid_loss"
    early_stopping_patience: int | None = Field(default=None, gt=0)  # validations of best_metric without improvement
    checkpoint_every: int = Field(default=1000, gt=0)  # steps
    # Or the interval as a share of the run's planned updates.
    checkpoint_fraction: float | None = Field(default=None, gt=0, lt=1)
    keep_checkpoints: int = Field(default=5, gt=0)  # the newest N stay in the artifact
    # Updates between resumable checkpoints (DeepSpeed's states, the optimizer's
    # included). The checkpoints between them are weights-only snapshots, which
    # averaging reads and no run resumes from: a third of the size (Adam keeps two
    # moments per weight) and no sharded save. A run's last checkpoint and one written on
    # SIGTERM are always resumable. null: every checkpoint is. The trained model is the
    # same either way, so it is not part of the artifact key.
    resume_every: int | None = Field(default=None, gt=0)
    # The final model averages the last N checkpoints (the paper averaged 5, section 6.1).
    average_last: int = Field(default=1, gt=0)
    # Or the checkpoints of the run's last share of updates (with checkpoint_fraction,
    # after the warmup): a small budget then never averages in its peak-rate weights.
    average_fraction: float | None = Field(default=None, gt=0, lt=1)
    log_every: int = Field(default=10, gt=0)  # steps between logged metrics
    seed: int = 1  # initial weights, batch order, dropout, the BLEU sample
    # Peak FLOP/s of one worker's device, for MFU and the "time x peak" FLOPs. Default:
    # the datasheet of a known GPU, else measured by a matmul probe on each worker
    # (pipeline/core/peak_flops.py); set it only to override those.
    peak_flops_per_worker: float | None = Field(default=None, gt=0)
    # Ray Train restarts crashed workers from the last checkpoint this many times.
    max_failures: int = Field(default=2, ge=-1)
    # Merged into the generated DeepSpeed JSON last (e.g. zero_optimization.offload_optimizer).
    deepspeed: dict[str, Any] = {}

    @model_validator(mode="after")
    def _has_a_budget_and_a_schedule(self) -> TrainConfig:
        budgets = (self.max_steps, self.max_epochs, self.max_train_tokens, self.max_train_flops, self.max_wall_time)
        if all(budget is None for budget in budgets):
            raise ValueError("set at least one budget: max_steps, max_epochs, max_train_tokens, "
                             "max_train_flops or max_wall_time")
        if self.schedule in ("cosine", "wsd") and all(
                budget is None for budget in (self.max_steps, self.max_train_flops, self.max_train_tokens)):
            raise ValueError(f"schedule {self.schedule!r} decays to the end of the budget: set max_steps, "
                             "max_train_flops or max_train_tokens (epochs and wall time have no end it can know "
                             "in advance)")
        if (self.schedule == "wsd" and self.average_fraction is not None
                and self.average_fraction >= self.decay_fraction - 1e-9):
            # Below, not at: the checkpoint where the decay starts holds peak-rate
            # weights, and a branched budget's artifact does not have it.
            raise ValueError(f"average_fraction ({self.average_fraction}) must be below decay_fraction "
                             f"({self.decay_fraction}): with schedule 'wsd' the averaged checkpoints must all come "
                             "from the decay")
        if self.average_last > self.keep_checkpoints:
            raise ValueError("average_last cannot exceed keep_checkpoints")
        if self.gpus_per_worker < 1 and not self.use_gpu:
            raise ValueError("gpus_per_worker is a share of a GPU: it needs use_gpu: true")
        if self.gpus_per_worker < 1 and self.workers > 1:
            raise ValueError(f"gpus_per_worker {self.gpus_per_worker:g} shares a GPU among runs of one worker; with "
                             f"workers: {self.workers} each worker needs a whole GPU (NCCL cannot join two workers "
                             "on one GPU)")
        if self.precision == "fp16" and not self.use_gpu:
            raise ValueError("precision fp16 needs use_gpu: true; on a CPU use auto, bf16 or fp32")
        if self.best_metric == "valid_bleu" and self.valid_bleu_every is None:
            raise ValueError("best_metric 'valid_bleu' needs valid_bleu_every (updates between BLEU validations)")
        if self.valid_bleu_every is not None and self.zero_stage == 3:
            # Each worker decodes its own share, a different number of forward passes:
            # ZeRO-3 gathers parameters collectively on every forward and would hang.
            raise ValueError("valid_bleu_every cannot be used with zero_stage 3")
        self._check_fractions()
        if self.threads_per_worker is not None and self.threads_per_worker > self.cpus_per_worker:
            raise ValueError(f"threads_per_worker ({self.threads_per_worker}) exceeds cpus_per_worker "
                             f"({self.cpus_per_worker}): the threads would oversubscribe the CPUs Ray gives "
                             "each worker")
        return self

    def trains_in_process(self) -> bool:
        """Whether a run trains in its stage's own process: ``in_process`` asked for it
        and the run has one worker, on a CPU."""
        return self.in_process and self.workers == 1 and not self.use_gpu

    def plans_updates(self) -> bool:
        """Whether a budget other than wall time bounds the run, so that its number of
        updates can be planned before it starts (stages/train/plan.py)."""
        return any(budget is not None for budget in (self.max_steps, self.max_epochs, self.max_train_tokens,
                                                     self.max_train_flops))

    def _check_fractions(self) -> None:
        """Each of warmup, checkpoint interval and averaging window is set one way."""
        for absolute, fraction in (("warmup_steps", "warmup_fraction"), ("checkpoint_every", "checkpoint_fraction"),
                                   ("average_last", "average_fraction")):
            if getattr(self, fraction) is not None and absolute in self.model_fields_set:
                raise ValueError(f"set {absolute} or {fraction}, not both: {fraction} is a share of the run's "
                                 f"planned updates, {absolute} a number")
        fractions = [name for name in ("warmup_fraction", "checkpoint_fraction") if getattr(self, name) is not None]
        if fractions and not self.plans_updates():
            raise ValueError(f"{fractions[0]} {NEEDS_A_PLAN}")
        if self.average_fraction is not None:
            if self.checkpoint_fraction is None:
                raise ValueError("average_fraction needs checkpoint_fraction, so that the checkpoints it averages "
                                 "fall inside its window")
            window = math.floor(self.average_fraction / self.checkpoint_fraction + 1e-9) + 1
            if window > self.keep_checkpoints:
                raise ValueError(f"average_fraction {self.average_fraction} spans {window} checkpoints at "
                                 f"checkpoint_fraction {self.checkpoint_fraction}, more than keep_checkpoints "
                                 f"({self.keep_checkpoints}) keeps")
            if self.warmup_fraction is not None and self.warmup_fraction + self.average_fraction > 1:
                raise ValueError(f"warmup_fraction + average_fraction exceed 1: the averaged checkpoints would "
                                 "include weights from the warmup")


class TrainStageConfig(Section):
    """A train stage's slice: its model and the train section with the model's overrides."""

    model: ModelSpec
    train: TrainConfig
    # Budgets branched from one run (the experiment's branch_budgets): the train stage
    # whose final checkpoint this run continues (weights, optimizer, data order and what
    # was spent), or None to start from nothing.
    start_from: str | None = None
    # A stable-phase segment: train under the wsd schedule of this budget, but stop
    # before its first update of decay. The budget's own run, and the next segment,
    # continue from here.
    until_decay: bool = False
    # The tune stage whose chosen peak learning rate this run trains with (the
    # experiment's tune section), replacing train.lr; None: train.lr as configured.
    lr_from: str | None = None

    @model_validator(mode="after")
    def _ae_fraction_needs_a_plan(self) -> TrainStageConfig:
        if self.model.settings.get("ae_fraction") is not None and not self.train.plans_updates():
            raise ValueError(f"settings.ae_fraction {NEEDS_A_PLAN}")
        if self.until_decay and self.train.schedule != "wsd":
            raise ValueError("a stable-phase segment (until_decay) needs train.schedule: wsd")
        refused = family(self.model.family).compile_refused
        if self.train.compile and refused:
            raise ValueError(f"train.compile is refused for the {self.model.family} family: {refused}")
        return self
