"""The DeepSpeed config generated from the train section and the resolved precision."""

from __future__ import annotations

from stages.train.config import TrainConfig
from stages.train.deepspeed_config import cpu_autocast, deepspeed_config


def test_deepspeed_config_is_generated_and_passthrough_keys_merge_deeply():
    config = TrainConfig(max_steps=1, zero_stage=2, gradient_accumulation=4, gradient_clipping=1.0,
                         use_gpu=True, deepspeed={"zero_optimization": {"offload_optimizer": {"device": "cpu"}}})
    generated = deepspeed_config(config, "bf16")
    assert generated["gradient_accumulation_steps"] == 4 and generated["gradient_clipping"] == 1.0
    assert generated["zero_optimization"] == {"stage": 2, "offload_optimizer": {"device": "cpu"}}
    assert generated["bf16"] == {"enabled": True} and "fp16" not in generated
    # fp16 on a GPU: DeepSpeed's dynamic loss scaling (loss_scale 0).
    assert deepspeed_config(config, "fp16")["fp16"]["loss_scale"] == 0
    # On a CPU bf16 is autocast in the loop; DeepSpeed itself stays fp32.
    assert "bf16" not in deepspeed_config(TrainConfig(max_steps=1), "bf16")
    assert cpu_autocast(TrainConfig(max_steps=1), "bf16") and not cpu_autocast(TrainConfig(max_steps=1), "fp32")
