"""The DeepSpeed JSON config, generated from our train section.

Precision is the one the worker resolved for its device (``pipeline/core/hardware.py``),
never ``auto``. On a GPU, ``bf16`` and ``fp16`` are DeepSpeed's own mixed-precision
modes (fp32 master weights in the optimizer, ZeRO-aware). fp16 uses dynamic loss
scaling as in Micikevicius et al. (2018): start at 2^16, halve the scale and skip the
update when a gradient overflows (after ``hysteresis`` overflows in a row), double it
after ``loss_scale_window`` clean updates. The loop counts the skipped updates.

On a CPU DeepSpeed runs in fp32 and the train loop wraps the forward in
``torch.autocast("cpu", torch.bfloat16)``: the matrix products run in bf16 on AMX
while weights and optimizer stay fp32.

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
        "gradient_clipping": config.gradient_clipping,
        "zero_optimization": {"stage": config.zero_stage},
        "steps_per_print": 10**9,  # our own logging reports progress
        "wall_clock_breakdown": False,
    }
    if config.use_gpu and precision == "bf16":
        generated["bf16"] = {"enabled": True}
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


def cpu_autocast(config: TrainConfig, precision: str) -> bool:
    return precision == "bf16" and not config.use_gpu
