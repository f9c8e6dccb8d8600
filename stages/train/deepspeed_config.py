"""The DeepSpeed JSON config, generated from our train section.

Precision is the one the worker resolved for its device (``pipeline/core/hardware.py``),
never ``auto``.

bf16, on a CPU as on a GPU, keeps the weights and the optimizer in fp32 and the train
loop runs the forward under ``torch.autocast`` in bf16: the matrix products run in bf16
(AMX, tensor cores) and the optimizer is torch's fused Adam, unwrapped. DeepSpeed's own
bf16 mode at ZeRO stage 0 wraps that optimizer in its per-parameter
``FP16_UnfusedOptimizer`` (an overflow check with a host sync, a norm and an fp32 copy
per parameter tensor): 3.2x the ATen operations of the plain step and a host sync per
tensor (benchmarks/training/step_overhead.py).

fp16 is DeepSpeed's own mode, with dynamic loss scaling as in Micikevicius et al. (2018):
start at 2^16, halve the scale and skip the update when a gradient overflows (after
``hysteresis`` overflows in a row), double it after ``loss_scale_window`` clean updates.
The loop counts the skipped updates.

At ZeRO stage 0 outside fp16 the loop clips the gradients itself (``loop_clips``);
DeepSpeed's throughput timer is off, since it synchronizes the device twice an update.

``train.deepspeed`` is merged in last, key by key, for anything not generated here
(offloading, communication overlap, activation checkpointing, ...).
"""

from __future__ import annotations

from typing import Any

from stages.train.config import TrainConfig


def deepspeed_config(config: TrainConfig, precision: str) -> dict[str, Any]:
    generated: dict[str, Any] = {
        # Batches are built by token count, so the micro-batch size in sentences is
        # nominal: DeepSpeed needs a number, the loop feeds it whole batches.
        "train_micro_batch_size_per_gpu": 1,
        "gradient_accumulation_steps": config.gradient_accumulation,
        "gradient_clipping": 0.0 if loop_clips(config, precision) else config.gradient_clipping,
        "zero_optimization": {"stage": config.zero_stage},
        "steps_per_print": 10**9,  # our own logging reports progress
        "wall_clock_breakdown": False,
        # Its forward hook fires even though the loop calls engine.module, and it
        # synchronizes the device before and after every update: the host could never
        # queue work ahead of the GPU. The loop times its updates itself.
        "timers": {"throughput": {"enabled": False}},
    }
    if config.use_gpu and precision == "fp16":
        generated["fp16"] = {"enabled": True, "loss_scale": 0, "initial_scale_power": 16,
                             "loss_scale_window": 1000, "hysteresis": 2, "min_loss_scale": 1}
    return merge(generated, config.deepspeed)


def merge(base: dict, overrides: dict) -> dict:
    merged = dict(base)
    for key, value in overrides.items():
        merged[key] = merge(merged[key], value) if isinstance(value, dict) and isinstance(merged.get(key), dict) \
            else value
    return merged


def bf16_autocast(precision: str) -> bool:
    """Whether the loop runs the forward under ``torch.autocast`` in bf16 (fp32 weights)."""
    return precision == "bf16"


def loop_clips(config: TrainConfig, precision: str) -> bool:
    """Whether the loop clips the gradients itself, with one fused norm left on the
    device, rather than DeepSpeed: at ZeRO stage 0 outside fp16. DeepSpeed's clipping
    there takes a norm per parameter tensor and all-reduces it, with one worker too;
    under ZeRO the gradients are partitioned and under fp16 still scaled, so DeepSpeed
    clips them."""
    return config.gradient_clipping > 0 and config.zero_stage == 0 and precision != "fp16"
