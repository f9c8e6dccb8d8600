"""What a config's graph will spend in counted training FLOPs, and the GPU-hours that
comes to at the model FLOPs utilisation measured for each size (``nmt inspect``).

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

import math

# The train stage's MFU measured on one H100 (bf16, the DeepSpeed engine, of the
# datasheet's peak), by the model's total parameters: the Transformer-Tiny of Wu et al.
# 2021's recipe over its whole run, validation included
# (benchmarks/reports/2026-11-27_gpu_wu_recipe_h100.md), and the Transformer base and big
# at 25,000-token batches (benchmarks/reports/2026-11-27_gpu_check_h100.md). A small model
# uses a GPU a hundred times less than a big one: one MFU for every size misprices a
# study of small models by that much.
MEASURED_MFU = ((2_605_056, 0.0015), (48_200_000, 0.061), (184_500_000, 0.188))


def measured_mfu(parameters: float) -> float:
    """The MFU measured for a model of this many parameters: interpolated in log MFU
    against log parameters between the sizes measured, the nearest one's outside them
    (an assumption: no smaller or larger model was measured)."""
    sizes = [math.log(size) for size, _ in MEASURED_MFU]
    rates = [math.log(mfu) for _, mfu in MEASURED_MFU]
    at = math.log(max(parameters, 1.0))
    if at <= sizes[0]:
        return MEASURED_MFU[0][1]
    if at >= sizes[-1]:
        return MEASURED_MFU[-1][1]
    upper = next(index for index, size in enumerate(sizes) if size >= at)
    share = (at - sizes[upper - 1]) / (sizes[upper] - sizes[upper - 1])
    return math.exp(rates[upper - 1] + share * (rates[upper] - rates[upper - 1]))


@dataclass(frozen=True)
class ComputeEstimate:
    runs: int
    run_flops: float  # counted training FLOPs of every run
    tune_stages: int
    trials: int
    tune_flops: float  # every trial to its trial budget
    run_flops_by_size: dict[str, float]  # <model>.<size> -> its runs' FLOPs
    tune_flops_by_size: dict[str, float]  # <model>.<size> -> its trials' FLOPs

    @property
    def total_flops(self) -> float:
        return self.run_flops + self.tune_flops


@dataclass(frozen=True)
class GpuHours:
    gpu: str  # as the datasheet calls it
    precision: str
    peak_flops: float  # dense, per GPU
    mfu: float

    def of(self, flops: float, mfu: float | None = None) -> float:
        """GPU-hours of ``flops`` at ``mfu`` (None: this rate's)."""
        return flops / (self.peak_flops * (mfu or self.mfu)) / 3600


def estimate(experiment: ExperimentConfig) -> ComputeEstimate | None:
    """The counted FLOPs of ``experiment``'s runs and tune trials, in all and by model
    size; None when a run has no FLOPs budget (its length is then not known before it
    runs)."""
    runs = experiment.trained_models()
    budgets = [experiment.train_stage_config(run).train.max_train_flops for run in runs]
    if not runs or any(budget is None for budget in budgets):
        return None
    by_size: dict[str, float] = {}
    if experiment.branch_budgets:
        by_size = _branched_flops(experiment)
    else:
        for run, budget in zip(runs, budgets):
            size = run.run_of or run.name
            by_size[size] = by_size.get(size, 0.0) + budget
    tunings = experiment.tunings()
    trials = [len(experiment.tune_of(sized).learning_rates) for _, sized, _ in tunings]
    tuned: dict[str, float] = {}
    for count, (_, sized, budget) in zip(trials, tunings):
        tuned[sized.name] = tuned.get(sized.name, 0.0) + count * budget
    return ComputeEstimate(runs=len(runs), run_flops=float(sum(by_size.values())), tune_stages=len(tunings),
                           trials=sum(trials), tune_flops=float(sum(tuned.values())), run_flops_by_size=by_size,
                           tune_flops_by_size=tuned)


def _branched_flops(experiment: ExperimentConfig) -> dict[str, float]:
    by_size = {}
    for model in experiment.models:
        for sized in model.at_sizes():
            decay = experiment.train_stage_config(sized).train.decay_fraction
            total = 0.0
            for seed in dict.fromkeys(seed for budget in experiment.budgets_of(sized)
                                      for seed in experiment.seeds_at(budget)):
                budgets = sorted(b for b in experiment.budgets_of(sized) if seed in experiment.seeds_at(b))
                total += budgets[-1] + decay * sum(budgets[:-1])
            by_size[sized.name] = total
    return by_size


def hours_by_measured_mfu(spent: ComputeEstimate, rate: GpuHours, parameters: dict[str, float]) -> tuple[float, float]:
    """(runs, tuning) GPU-hours, each size's FLOPs at the MFU measured for its
    ``parameters`` (<model>.<size> -> total parameters)."""
    def hours(by_size: dict[str, float]) -> float:
        return sum(rate.of(flops, measured_mfu(parameters[size])) for size, flops in by_size.items())
    return hours(spent.run_flops_by_size), hours(spent.tune_flops_by_size)


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
