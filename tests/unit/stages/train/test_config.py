"""The train section's validation: budgets, precision and threads, misspelt keys, per-model overrides."""

from __future__ import annotations

import pytest
import yaml

from pipeline.config import ConfigError, load_config
from stages.train.config import TrainConfig
from tests.helpers import shipped_config


def test_precision_defaults_to_auto_and_threads_cannot_oversubscribe_a_workers_cpus(tmp_path):
    assert TrainConfig(max_steps=1).precision == "auto"
    assert TrainConfig(max_steps=1, cpus_per_worker=4, threads_per_worker=4).threads_per_worker == 4
    with pytest.raises(ConfigError, match=r"train: .*threads_per_worker \(3\) exceeds cpus_per_worker \(2\)"):
        load_config(_with({"max_steps": 1, "cpus_per_worker": 2, "threads_per_worker": 3}, tmp_path))
    with pytest.raises(ConfigError, match=r"train: .*fp16 needs use_gpu: true"):
        load_config(_with({"max_steps": 1, "precision": "fp16"}, tmp_path))


def _with(section: dict, tmp_path):
    data = shipped_config("smoke.yaml")
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


def test_best_by_bleu_needs_bleu_validations_and_zero_3_cannot_decode_per_worker(tmp_path):
    with pytest.raises(ConfigError, match=r"train: .*best_metric 'valid_bleu' needs valid_bleu_every"):
        load_config(_with({"max_steps": 1, "best_metric": "valid_bleu"}, tmp_path))
    with pytest.raises(ConfigError, match=r"train: .*valid_bleu_every cannot be used with zero_stage 3"):
        load_config(_with({"max_steps": 1, "valid_bleu_every": 10, "zero_stage": 3}, tmp_path))
    assert TrainConfig(max_steps=1, valid_bleu_every=10, best_metric="valid_bleu").valid_bleu_beam == 1


# Not the default comparison (configs/multi30k_en_de.yaml): its runs decode once, when
# evaluated, to keep the whole graph within its time on two cores.
@pytest.mark.parametrize("name", ["smoke.yaml", "multi30k_sweep.yaml",
                                  "multi30k_en_de_converged.yaml", "multi30k_en_de_wu2021.yaml",
                                  "multi30k_decoder_only_losses.yaml"])
def test_the_shipped_configs_draw_bleu_curves(name):
    from tests.helpers import REPO

    config = load_config(REPO / "configs" / name)
    assert config.train.valid_bleu_every is not None


def test_the_ablation_shares_the_sweeps_data_stages():
    sweep, ablation = shipped_config("multi30k_sweep.yaml"), shipped_config("multi30k_decoder_only_losses.yaml")
    for section in ("download", "clean", "bpe", "tokenize"):
        assert ablation[section] == sweep[section], section
