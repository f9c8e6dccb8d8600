"""What ``nmt inspect`` says a config's graph will spend (pipeline/compute_estimate.py),
checked against sums done by hand from the configs' own numbers."""

from __future__ import annotations

import math
import re

import pytest
import yaml
from typer.testing import CliRunner

from pipeline.cli import app
from pipeline.compute_estimate import MEASURED_MFU, estimate, gpu_hours, measured_mfu
from pipeline.config import ExperimentConfig, load_config
from tests.helpers import REPO, shipped_config

pytestmark = pytest.mark.fast

FAMILY = "models=[{name: t, family: transformer, sizes: [w8, w16]}]"


def test_runs_each_train_to_their_budget_and_trials_to_theirs():
    experiment = load_config(REPO / "configs" / "multi30k_frontier.yaml", [
        FAMILY, "budgets=[1.0e10, 1.0e11]", "seeds=[1, 2]", "extra_seeds=null",
        "tune={learning_rates: [1.0e-3, 2.0e-3, 4.0e-3, 8.0e-3], budget: 1.0e10, budget_fraction: 0.5}"])
    spent = estimate(experiment)
    assert spent.runs == 2 * 2 * 2  # sizes x budgets x seeds
    assert spent.run_flops == pytest.approx(2 * 2 * (1.0e10 + 1.0e11))
    # One tune stage per size and trial budget: 1e10 (half of 1e10 is below tune.budget)
    # and 5e10 (half of 1e11), four rates each, seeds sharing them.
    assert (spent.tune_stages, spent.trials) == (4, 16)
    assert spent.tune_flops == pytest.approx(2 * 4 * (1.0e10 + 5.0e10))


def test_branched_budgets_count_one_stable_phase_and_each_decay():
    """The default job's budgets, each family at one size and rate: per family and seed,
    the stable phase to 2e12's decay once, and the decays of 6e11 and 2e12 (decay_fraction
    0.2 of each)."""
    raw = shipped_config("multi30k_en_de.yaml")
    del raw["select"]
    raw["models"] = [{"name": model["name"], "family": model["family"], "settings": model.get("settings", {}),
                      "sizes": ["w32"], "train": {"lr": 8e-3}} for model in raw["models"]]
    experiment = ExperimentConfig.model_validate(raw)
    assert experiment.branch_budgets and sorted(experiment.budgets) == [6.0e11, 2.0e12]
    spent = estimate(experiment)
    families, seeds = len(experiment.models), len(experiment.seeds)
    decay = experiment.train.decay_fraction
    assert spent.runs == families * seeds * 2
    assert spent.run_flops == pytest.approx(families * seeds * (2.0e12 + decay * 6.0e11))
    assert spent.tune_flops == 0


def test_a_run_without_a_flops_budget_has_no_estimate():
    assert estimate(load_config(REPO / "configs" / "smoke.yaml")) is None  # max_steps: its length is the data's


def test_gpu_hours_divide_by_the_datasheet_peak_at_the_mfu_assumed():
    rate = gpu_hours("NVIDIA H200", "auto", 0.1)
    assert (rate.gpu, rate.precision, rate.peak_flops) == ("H200 SXM", "bf16", 989.4e12)
    assert rate.of(989.4e12 * 0.1 * 3600) == pytest.approx(1.0)
    with pytest.raises(ValueError, match=r"--gpu B300: no datasheet peak for it \(known: H100 PCIe"):
        gpu_hours("B300", "bf16", 0.1)
    with pytest.raises(ValueError, match="the V100 SXM2 datasheet gives no bf16 peak"):
        gpu_hours("V100", "bf16", 0.1)


def test_inspect_prints_the_gpu_study_s_gpu_hours_at_each_size_s_measured_mfu(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    config = REPO / "configs" / "wmt14_frontier_gpu.yaml"
    result = CliRunner().invoke(app, ["inspect", str(config)], terminal_width=1000)
    assert result.exit_code == 0, result.output
    spent = estimate(load_config(config))
    assert f"total {spent.total_flops:.2e}" in result.output
    assert math.isclose(spent.tune_flops, 3 * spent.run_flops / 2)  # three rates at full budget, two seeds
    assert math.isclose(sum(spent.run_flops_by_size.values()), spent.run_flops)
    # Each size at its own measured MFU: more hours than one 6% for every size, since
    # most of the study's sizes are far below the Transformer base that measured 6.1%.
    output = " ".join(result.output.split())  # the console wraps long lines
    said = re.search(r"of one H100 SXM5's bf16 peak \(989 TFLOP/s, the datasheet's\): ([\d,.]+) \(runs", output)
    at_six = spent.total_flops / (989.4e12 * 0.06) / 3600
    assert said and float(said.group(1).replace(",", "")) > 2 * at_six
    assert "puts 4 runs on a GPU (train.gpus_per_worker 0.25)" in output
    fixed = CliRunner().invoke(app, ["inspect", str(config), "--mfu", "0.06"], terminal_width=1000)
    assert f"GPU-hours at 6.0% MFU of one H100 SXM5's bf16 peak (989 TFLOP/s, the datasheet's): {at_six:,.1f} " \
        in " ".join(fixed.output.split())


def test_the_measured_mfu_is_interpolated_in_log_parameters_and_held_outside():
    (small, small_mfu), (base, base_mfu), (big, big_mfu) = MEASURED_MFU
    assert measured_mfu(small) == pytest.approx(small_mfu) and measured_mfu(big) == pytest.approx(big_mfu)
    assert measured_mfu(small / 10) == small_mfu and measured_mfu(big * 10) == big_mfu
    halfway = math.sqrt(small * base)  # halfway in log parameters: halfway in log MFU
    assert measured_mfu(halfway) == pytest.approx(math.sqrt(small_mfu * base_mfu))
    assert small_mfu < measured_mfu(halfway) < base_mfu


def test_inspect_prices_a_select_config_s_first_round_and_its_confirmation(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    raw = yaml.safe_load((REPO / "configs" / "multi30k_en_de.yaml").read_text())
    raw["models"] = [{"name": "transformer", "family": "transformer", "sizes": ["w24", "w32", "w48"]},
                     {"name": "convs2s", "family": "convs2s", "sizes": ["w32", "w48"]}]
    raw.update(budgets=[1e12, 3e12], seeds=[1, 2, 3], select={"seeds": [101], "learning_rates": [4e-3, 8e-3]})
    raw["artifact_root"] = str(tmp_path / "artifacts")
    config = tmp_path / "select.yaml"
    config.write_text(yaml.safe_dump(raw))
    result = CliRunner().invoke(app, ["inspect", str(config)], terminal_width=1000)
    assert result.exit_code == 0, result.output
    output = " ".join(result.output.split())
    # Five sizes at two rates, each a stable phase to 3e12 and a branch at 1e12.
    first_round = (3 + 2) * 2 * (3e12 + 0.2 * 1e12)
    assert f"the selection's first round, 20 runs, {first_round:.2e} counted training FLOPs" in output
    least, most = 2 * 3 * (3e12 + 0.2 * 1e12), 2 * 3 * 4e12
    assert f"confirming the choice on 3 seeds, {least:.2e} to {most:.2e}" in output
