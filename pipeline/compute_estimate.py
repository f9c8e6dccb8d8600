"""What a config's graph will spend in counted training FLOPs, and the GPU-hours that
comes to at an assumed model FLOPs utilisation (``nmt inspect``).

Counted from the config alone, before anything runs: every run trains to its budget
(``train.max_train_flops``, one per budget with ``budgets:``), and every tune stage's
trials to their trial budget, one trial per rate of ``tune.learning_rates``. What it
leaves out, said beside the figure: ASHA stopping the worse trials early (less), a grid
extended past an edge (more, up to ``tune.max_extensions`` trials a stage), validation,
decoding and evaluation.

With ``branch_budgets`` a size and seed trains its stable phase once to the largest
budget's decay, and each budget adds only its own decay: the counted FLOPs are the
largest budget plus ``decay_fraction`` of each smaller one.
"""

from __future__ import annotations

from dataclasses import dataclass

from pipeline.config import ExperimentConfig
from pipeline.core.peak_flops import GPU_DATASHEET_PEAKS

# The train stage's MFU measured on an H100 for the Transformer base (the smallest model
# measured there) in the DeepSpeed engine: 6.1% and 7.3% on two days (docs/gpu.md). The
# GPU study's models are mostly smaller than base, so the estimate takes the lower figure
# unless told otherwise.
DEFAULT_MFU = 0.06


@dataclass(frozen=True)
class ComputeEstimate:
    runs: int
    run_flops: float  # counted training FLOPs of every run
    tune_stages: int
    trials: int
    tune_flops: float  # every trial to its trial budget

    @property
    def total_flops(self) -> float:
        return self.run_flops + self.tune_flops


@dataclass(frozen=True)
class GpuHours:
    gpu: str  # as the datasheet calls it
    precision: str
    peak_flops: float  # dense, per GPU
    mfu: float

    def of(self, flops: float) -> float:
        return flops / (self.peak_flops * self.mfu) / 3600


def estimate(experiment: ExperimentConfig) -> ComputeEstimate | None:
    """The counted FLOPs of ``experiment``'s runs and tune trials; None when a run has no
    FLOPs budget (its length is then not known before it runs)."""
    runs = experiment.trained_models()
    budgets = [experiment.train_stage_config(run).train.max_train_flops for run in runs]
    if not runs or any(budget is None for budget in budgets):
        return None
    run_flops = float(sum(budgets))
    if experiment.branch_budgets:
        run_flops = _branched_flops(experiment)
    tunings = experiment.tunings()
    trials = [len(experiment.tune_of(sized).learning_rates) for _, sized, _ in tunings]
    tune_flops = float(sum(count * budget for count, (_, _, budget) in zip(trials, tunings)))
    return ComputeEstimate(runs=len(runs), run_flops=run_flops, tune_stages=len(tunings), trials=sum(trials),
                           tune_flops=tune_flops)


def _branched_flops(experiment: ExperimentConfig) -> float:
    total = 0.0
    for model in experiment.models:
        for sized in model.at_sizes():
            decay = experiment.train_stage_config(sized).train.decay_fraction
            for seed in dict.fromkeys(seed for budget in experiment.budgets_of(sized)
                                      for seed in experiment.seeds_at(budget)):
                budgets = sorted(b for b in experiment.budgets_of(sized) if seed in experiment.seeds_at(b))
                total += budgets[-1] + decay * sum(budgets[:-1])
    return total


def gpu_hours(gpu: str, precision: str, mfu: float) -> GpuHours:
    """The datasheet peak of the GPU named (``H100``, ``H200``, ``A100``...) in
    ``precision`` (``auto`` reads as bf16, what the train stage picks on such GPUs)."""
    wanted = "bf16" if precision == "auto" else precision
    for name, model, peaks in GPU_DATASHEET_PEAKS:
        if name.lower() in gpu.lower():
            if wanted not in peaks:
                raise ValueError(f"--gpu {gpu}: the {model} datasheet gives no {wanted} peak "
                                 f"(it gives {', '.join(peaks)})")
            return GpuHours(gpu=model, precision=wanted, peak_flops=peaks[wanted], mfu=mfu)
    known = ", ".join(dict.fromkeys(name for name, _, _ in GPU_DATASHEET_PEAKS))
    raise ValueError(f"--gpu {gpu}: no datasheet peak for it (known: {known})")
