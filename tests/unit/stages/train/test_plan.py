"""Schedules fair to every budget: fractions of a run planned in updates, and the
checkpoints a fraction averages. For each budget of the default job the warmup and the
averaged checkpoints fall where they should."""

from __future__ import annotations

from pathlib import Path

import pytest

from pipeline.config import load_config
from stages.shared.inference.model_file import build_for_vocabulary, vocabulary_facts
from stages.shared.models.flops import training_flops
from stages.train import plan
from stages.train.config import TrainConfig, TrainStageConfig
from stages.train.data import TokenizedSplit

# A shipped config whose warmup, checkpoints, averaging and decoder-only loss schedule are
# all shares of each run: the sweep.
FRACTIONS_JOB = Path(__file__).parents[4] / "configs" / "multi30k_sweep.yaml"


def test_the_first_budget_to_run_out_plans_the_run(tokenized):
    train = TokenizedSplit(tokenized, "train")
    per_pair = 1000.0  # FLOPs of every pair: the plan is then pairs x 1000 per epoch
    steps_only = TrainConfig(max_steps=70, max_tokens=400)
    assert plan.planned_updates(steps_only, train.src_lengths, train.tgt_lengths, 1, lambda s, t, source: per_pair) == 70
    epoch = plan.planned_updates(TrainConfig(max_epochs=1, max_tokens=400), train.src_lengths, train.tgt_lengths, 1,
                                 lambda s, t, source: per_pair)
    pairs = len(train.src_lengths)
    flops = TrainConfig(max_train_flops=pairs * per_pair / 2, max_steps=10_000, max_tokens=400)
    assert plan.planned_updates(flops, train.src_lengths, train.tgt_lengths, 1, lambda s, t, source: per_pair) \
        == pytest.approx(epoch / 2, abs=1)
    tokens = TrainConfig(max_train_tokens=int(train.tgt_lengths.sum()) * 3, max_tokens=400)
    assert plan.planned_updates(tokens, train.src_lengths, train.tgt_lengths, 1, lambda s, t, source: per_pair) \
        == pytest.approx(3 * epoch, abs=1)
    # Two workers each take every other batch: half the updates an epoch.
    assert plan.planned_updates(TrainConfig(max_epochs=1, max_tokens=400), train.src_lengths, train.tgt_lengths, 2,
                                lambda s, t, source: per_pair) == pytest.approx(epoch / 2, abs=1)
    wall = TrainConfig(max_wall_time=60, max_tokens=400)
    assert plan.planned_updates(wall, train.src_lengths, train.tgt_lengths, 1, lambda s, t, source: per_pair) is None


def test_fractions_become_updates_of_the_run_and_ae_fraction_becomes_ae_steps():
    from stages.shared.models.spec import ModelSpec

    config = TrainStageConfig(
        model=ModelSpec(name="lm", family="decoder_only", preset="tiny", settings={"ae_fraction": 0.5}),
        train=TrainConfig(max_train_flops=1e12, warmup_fraction=0.1, checkpoint_fraction=0.25,
                          average_fraction=0.3, keep_checkpoints=3))
    before = config.model_dump()
    run = plan.plan_run(config, 3e-4, 207)
    assert run == plan.RunPlan(lr=3e-4, warmup_steps=21, checkpoint_every=52, ae_steps=104, updates=207)
    assert config.model_dump() == before  # the config is passed on as it was validated
    assert plan.plan_run(config, 3e-4, 3).warmup_steps == 1  # never a warmup of 0 updates
    absolute = TrainStageConfig(model=config.model.model_copy(update={"settings": {}}),
                                train=TrainConfig(max_steps=10, lr=1e-3, warmup_steps=4, checkpoint_every=5))
    assert not plan.needs_planning(absolute)
    assert plan.plan_run(absolute, 1e-3, None) == plan.as_configured(absolute.train) == plan.RunPlan(
        lr=1e-3, warmup_steps=4, checkpoint_every=5, ae_steps=None, updates=None)
    with pytest.raises(ValueError, match="planned from its data"):
        plan.as_configured(config.train)


def test_average_fraction_averages_the_checkpoints_of_the_runs_last_share():
    training = TrainConfig(max_steps=100, checkpoint_fraction=0.1, average_fraction=0.2, keep_checkpoints=3)
    assert plan.averaged([70, 80, 90, 100], training) == [80, 90, 100]
    assert plan.averaged([80, 90, 97], training) == [80, 90, 97]  # the run ended a little early
    assert plan.averaged([100], training) == [100]
    assert plan.averaged([60, 80, 100], TrainConfig(max_steps=100, average_last=2, keep_checkpoints=3)) == [80, 100]


@pytest.mark.parametrize("settings, message", [
    ({"warmup_fraction": 0.0}, "greater than 0"),
    ({"checkpoint_fraction": 1.0}, "less than 1"),
    ({"warmup_fraction": 0.1, "warmup_steps": 100}, "set warmup_steps or warmup_fraction, not both"),
    ({"checkpoint_fraction": 0.1, "checkpoint_every": 100}, "set checkpoint_every or checkpoint_fraction, not both"),
    ({"average_fraction": 0.2}, "average_fraction needs checkpoint_fraction"),
    ({"average_fraction": 0.5, "checkpoint_fraction": 0.1}, "spans 6 checkpoints"),
    ({"warmup_fraction": 0.9, "average_fraction": 0.2, "checkpoint_fraction": 0.1, "keep_checkpoints": 3},
     "would include weights from the warmup"),
])
def test_bad_fractions_name_the_key_and_the_rule(tmp_path, settings, message):
    from pipeline.config import ConfigError

    text = FRACTIONS_JOB.read_text(encoding="utf-8")
    for key in ("warmup_fraction", "checkpoint_fraction", "average_fraction", "keep_checkpoints"):
        text = "\n".join(line for line in text.splitlines() if not line.strip().startswith(f"{key}:"))
    for key, value in settings.items():
        text = text.replace("\ntrain:\n", f"\ntrain:\n  {key}: {value}\n", 1)
    path = tmp_path / "job.yaml"
    path.write_text(text, encoding="utf-8")
    with pytest.raises((ConfigError, ValueError), match=message):
        load_config(path)


def test_an_ae_fraction_without_a_budget_to_plan_names_the_setting(tmp_path):
    from pipeline.config import ConfigError

    text = FRACTIONS_JOB.read_text(encoding="utf-8")
    text = "\n".join(line for line in text.splitlines()
                     if not line.strip().startswith(("warmup_fraction:", "checkpoint_fraction:", "average_fraction:",
                                                     "max_train_flops:", "budgets:", "schedule:", "lr:")))
    with pytest.raises((ConfigError, ValueError), match="decoder_only_tiny.*settings.ae_fraction is a share"):
        path = tmp_path / "job.yaml"
        path.write_text(text, encoding="utf-8")
        load_config(path)


def test_each_budget_of_the_sweep_warms_up_and_averages_where_it_should(tokenized):
    """The sweep's fractions on the test corpus's batches: warmup a tenth of each
    run, and the averaged checkpoints all after the warmup, in the run's last fifth."""
    experiment = load_config(FRACTIONS_JOB)
    train = TokenizedSplit(tokenized, "train")
    facts = vocabulary_facts(tokenized, train.vocab)
    checked = 0
    for spec in experiment.trained_models():
        config = experiment.train_stage_config(spec)
        training = config.train
        assert training.warmup_fraction and training.checkpoint_fraction and training.average_fraction
        model = build_for_vocabulary(config.model, facts)
        updates = plan.planned_updates(training, train.src_lengths, train.tgt_lengths, training.workers,
                                       lambda s, t, source: training_flops(model, s, t, source),
                                       plan.source_logit_schedule(model, config.model.settings))
        run = plan.plan_run(config, training.lr, updates)
        warmup, interval = run.warmup_steps, run.checkpoint_every
        assert warmup == max(1, round(training.warmup_fraction * updates))
        # The run stops on the FLOPs it counts: within a few updates of the plan either way.
        for last in (updates - 2, updates, updates + 2):
            steps = [step for step in range(interval, last, interval)] + [last]
            steps = steps[-training.keep_checkpoints:]
            chosen = plan.averaged(steps, training)
            assert chosen[-1] == last and all(step > warmup for step in chosen), (spec.name, updates, chosen)
            assert all(step >= last * (1 - training.average_fraction) - 1e-9 for step in chosen)
        if config.model.family == "decoder_only":
            assert run.ae_steps < updates  # its L_AE ends within the run
        checked += 1
    assert checked == 24  # three families x four budgets x two seeds


def test_a_decoder_only_run_plans_the_cheaper_updates_after_its_reconstruction_loss():
    # 10 FLOPs an update with source logits, 6 without, a budget of 100.
    assert plan._updates_for_flops(100, 10, 6, None) == 10
    assert plan._updates_for_flops(100, 10, 6, ("fraction", 0.5)) == pytest.approx(12.5)  # 6.25 x 10 + 6.25 x 6
    assert plan._updates_for_flops(100, 10, 6, ("steps", 4)) == pytest.approx(4 + 60 / 6)
    assert plan._updates_for_flops(100, 10, 6, ("steps", 50)) == 10  # the budget ends first


def test_the_source_logit_schedule_follows_the_model_settings():
    from stages.shared.models.build import build_model

    assert plan.source_logit_schedule(build_model("transformer", "tiny", {}, 100, 100), {}) is None
    lm = build_model("decoder_only", "tiny", {"ae_fraction": 0.3}, 100, 100)
    assert plan.source_logit_schedule(lm, {"ae_fraction": 0.3}) == ("fraction", 0.3)
    assert plan.source_logit_schedule(build_model("decoder_only", "tiny", {"ae_steps": 40}, 100, 100),
                                      {"ae_steps": 40}) == ("steps", 40)
    assert plan.source_logit_schedule(build_model("decoder_only", "tiny", {"ae_loss": False}, 100, 100), {}) is None


def test_the_model_built_before_planning_gets_the_resolved_ae_steps():
    from stages.shared.models.build import build_model
    from stages.shared.models.decoder_only.config import ae_weight
    from stages.shared.models.spec import ModelSpec

    spec = ModelSpec(name="lm", family="decoder_only", preset="tiny", settings={"ae_fraction": 0.5})
    model = build_model("decoder_only", "tiny", dict(spec.settings), 100, 100)
    run = plan.plan_run(TrainStageConfig(model=spec, train=TrainConfig(max_steps=200)), 1e-3, 200)
    plan.apply_settings(model, run)
    assert model.config.ae_steps == 100 and model.config.ae_fraction is None
    assert ae_weight(99, model.config) > 0 and ae_weight(100, model.config) == 0
    other = build_model("transformer", "tiny", {}, 100, 100)
    before = other.config
    plan.apply_settings(other, run)
    assert other.config is before


def test_a_wsd_budget_whose_decay_starts_before_the_warmup_ends_is_refused_naming_the_keys():
    training = TrainConfig(schedule="wsd", lr=1e-3, warmup_steps=90, max_train_flops=1e11, decay_fraction=0.2)
    with pytest.raises(ValueError, match=r"plans 100 updates .*train.decay_fraction 0.2\) starts after update 80, "
                                         r"before the warmup ends \(train.warmup_steps 90\)"):
        plan.check_warmup_before_decay(training, 100)
    plan.check_warmup_before_decay(training, 200)  # decay from update 160: after the warmup
    plan.check_warmup_before_decay(training.model_copy(update={"schedule": "cosine"}), 100)  # wsd only
