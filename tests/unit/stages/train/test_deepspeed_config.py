"""The DeepSpeed config generated from the train section and the resolved precision."""

from __future__ import annotations

from stages.train.config import TrainConfig
from stages.train.deepspeed_config import bf16_autocast, deepspeed_config, loop_clips


def test_deepspeed_config_is_generated_and_passthrough_keys_merge_deeply():
    config = TrainConfig(max_steps=1, zero_stage=2, gradient_accumulation=4, gradient_clipping=1.0,
                         use_gpu=True, deepspeed={"zero_optimization": {"offload_optimizer": {"device": "cpu"}}})
    generated = deepspeed_config(config, "bf16")
    assert generated["gradient_accumulation_steps"] == 4 and generated["gradient_clipping"] == 1.0
    assert generated["zero_optimization"] == {"stage": 2, "offload_optimizer": {"device": "cpu"}}
    # bf16 is autocast in the loop, on a GPU as on a CPU: DeepSpeed itself stays fp32.
    assert "bf16" not in generated and "fp16" not in generated
    assert "bf16" not in deepspeed_config(TrainConfig(max_steps=1), "bf16")
    assert bf16_autocast("bf16") and not bf16_autocast("fp32") and not bf16_autocast("fp16")
    # fp16 on a GPU: DeepSpeed's dynamic loss scaling (loss_scale 0).
    assert deepspeed_config(config, "fp16")["fp16"]["loss_scale"] == 0
    # The throughput timer synchronizes the device twice an update: off, unless asked for.
    assert generated["timers"] == {"throughput": {"enabled": False}}
    timed = config.model_copy(update={"deepspeed": {"timers": {"throughput": {"enabled": True}}}})
    assert deepspeed_config(timed, "bf16")["timers"]["throughput"]["enabled"] is True


def test_the_loop_clips_at_zero_stage_0_outside_fp16_and_deepspeed_elsewhere():
    plain = TrainConfig(max_steps=1, gradient_clipping=1.0, use_gpu=True)
    assert loop_clips(plain, "bf16") and loop_clips(plain, "fp32")
    assert deepspeed_config(plain, "bf16")["gradient_clipping"] == 0.0  # not twice
    assert not loop_clips(plain, "fp16") and deepspeed_config(plain, "fp16")["gradient_clipping"] == 1.0
    zero = plain.model_copy(update={"zero_stage": 1})
    assert not loop_clips(zero, "bf16") and deepspeed_config(zero, "bf16")["gradient_clipping"] == 1.0
    unclipped = plain.model_copy(update={"gradient_clipping": 0.0})
    assert not loop_clips(unclipped, "fp32") and deepspeed_config(unclipped, "fp32")["gradient_clipping"] == 0.0
