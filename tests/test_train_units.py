"""The train stage's small parts, without Ray: schedule, budgets, DeepSpeed config,
teacher-forcing batches, checkpoint averaging, and the train section's validation."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
import yaml

from pipeline.config import ConfigError, TrainConfig, load_config
from stages.train.checkpoints import average_weights
from stages.train.deepspeed_config import cpu_autocast, deepspeed_config
from stages.train.progress import TrainingProgress, budget_fraction, budget_reached
from stages.train.schedule import learning_rate

from conftest import REPO


def test_noam_schedule_peaks_at_warmup_with_the_papers_value():
    config = TrainConfig(max_steps=10, warmup_steps=4000)
    peak = 512 ** -0.5 * 4000 ** -0.5
    assert learning_rate(4000, config, 512) == pytest.approx(peak)
    assert learning_rate(2000, config, 512) == pytest.approx(peak / 2)  # linear warmup
    assert learning_rate(16000, config, 512) == pytest.approx(peak / 2)  # inverse square root decay
    assert learning_rate(0, config, 512) > 0  # the first update is step 1, never lr 0


def test_cosine_schedule_warms_up_then_decays_to_min_lr():
    config = TrainConfig(schedule="cosine", lr=1e-3, min_lr=1e-5, warmup_steps=10, max_steps=110)
    assert learning_rate(5, config, 512) == pytest.approx(5e-4)
    assert learning_rate(10, config, 512) == pytest.approx(1e-3)
    assert learning_rate(60, config, 512) == pytest.approx((1e-3 + 1e-5) / 2)
    assert learning_rate(110, config, 512) == pytest.approx(1e-5)


def test_the_first_budget_reached_stops_training():
    config = TrainConfig(max_steps=100, max_train_tokens=5000, max_wall_time=60.0)
    assert budget_reached(config, TrainingProgress(step=99, train_tokens=4999, seconds=59.0)) == ""
    assert budget_reached(config, TrainingProgress(step=10, train_tokens=5000)) == "max_train_tokens"
    assert budget_reached(config, TrainingProgress(step=10, seconds=61.0)) == "max_wall_time"
    assert budget_reached(config, TrainingProgress(step=100)) == "max_steps"
    flops = TrainConfig(max_train_flops=1e12, early_stopping_patience=2)
    assert budget_reached(flops, TrainingProgress(train_flops=1e12)) == "max_train_flops"
    assert budget_reached(flops, TrainingProgress(validations_without_improvement=2)) == "early_stopping"


def test_the_progress_bar_follows_the_budget_closest_to_its_end():
    config = TrainConfig(max_train_flops=1e12, max_wall_time=100.0, max_epochs=4)
    assert budget_fraction(config, TrainingProgress(train_flops=2.5e11, seconds=10.0), 50) == 0.25
    assert budget_fraction(config, TrainingProgress(train_flops=1e11, seconds=60.0), 50) == 0.6
    assert budget_fraction(config, TrainingProgress(epoch=3, step_in_epoch=25), 50) == 0.875
    assert budget_fraction(config, TrainingProgress(seconds=500.0), 50) == 1.0


def test_progress_round_trips_through_json_with_no_validation_yet():
    progress = TrainingProgress(step=7, epoch=1, step_in_epoch=3, train_flops=1.5e9)
    restored = TrainingProgress.from_json(progress.to_json())
    assert restored == progress and math.isinf(restored.best_valid_loss)


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


def test_precision_defaults_to_auto_and_threads_cannot_oversubscribe_a_workers_cpus(tmp_path):
    assert TrainConfig(max_steps=1).precision == "auto"
    assert TrainConfig(max_steps=1, cpus_per_worker=4, threads_per_worker=4).threads_per_worker == 4
    with pytest.raises(ConfigError, match=r"train: .*threads_per_worker \(3\) exceeds cpus_per_worker \(2\)"):
        load_config(_with({"max_steps": 1, "cpus_per_worker": 2, "threads_per_worker": 3}, tmp_path))
    with pytest.raises(ConfigError, match=r"train: .*fp16 needs use_gpu: true"):
        load_config(_with({"max_steps": 1, "precision": "fp16"}, tmp_path))


def test_averaging_checkpoints_is_the_elementwise_mean():
    states = [{"w": torch.full((2, 2), float(value)), "b": torch.tensor([value * 2.0])} for value in (1, 2, 6)]
    averaged = average_weights(states)
    assert torch.equal(averaged["w"], torch.full((2, 2), 3.0)) and torch.equal(averaged["b"], torch.tensor([6.0]))


def test_teacher_forcing_batches_shift_the_target_and_pad(tokenized):
    from stages.train.data import TokenizedSplit

    split = TokenizedSplit(tokenized, "train")
    indices = np.array([0, 5, 9])
    batch = split.batch(indices)
    for row, index in enumerate(indices):
        length = split.tgt_lengths[index]
        assert batch.tgt_out[row, length - 1] == split.vocab["special_ids"]["eos"]
        assert batch.tgt_in[row, 0] == split.vocab["special_ids"]["bos"]
        assert torch.equal(batch.tgt_in[row, 1:length], batch.tgt_out[row, :length - 1])
        assert (batch.tgt_out[row, length:] == 0).all() and (batch.tgt_in[row, length:] == 0).all()
        assert (batch.src[row, split.src_lengths[index]:] == 0).all()
        assert (batch.src[row, :split.src_lengths[index]] != 0).all()
    assert batch.target_tokens == int(split.tgt_lengths[indices].sum())


def _with(section: dict, tmp_path):
    data = yaml.safe_load((REPO / "configs" / "smoke.yaml").read_text())
    data["train"] = section
    path = tmp_path / "exp.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def test_a_train_section_without_a_budget_is_rejected(tmp_path):
    with pytest.raises(ConfigError, match=r"train: .*set at least one budget"):
        load_config(_with({"workers": 1}, tmp_path))


def test_a_misspelt_train_key_names_the_line_and_the_close_match(tmp_path):
    with pytest.raises(ConfigError, match=r"train\.max_step: unknown key; did you mean 'max_steps'"):
        load_config(_with({"max_step": 10}, tmp_path))


def test_a_models_train_override_is_validated_and_applied(tmp_path):
    path = _with({"max_steps": 10}, tmp_path)
    data = yaml.safe_load(path.read_text())
    data["models"][0]["train"] = {"lr_scale": 2.0}
    path.write_text(yaml.safe_dump(data))
    config = load_config(path)
    assert config.train_stage_config(config.models[0]).train.lr_scale == 2.0
    assert config.train_stage_config(config.models[1]).train.lr_scale == 1.0
    data["models"][0]["train"] = {"lr_scal": 2.0}
    path.write_text(yaml.safe_dump(data))
    with pytest.raises(ConfigError, match=r"model 'rnn_tiny': train\.lr_scal: Extra inputs"):
        load_config(path)
