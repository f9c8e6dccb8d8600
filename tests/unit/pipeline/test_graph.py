"""Planning (pipeline/graph.py): which stages a run will do, given the store, ``until``
and ``force``; keys depend only on the config and the upstream keys."""

from __future__ import annotations

import pytest

from pipeline.core.artifacts import ArtifactStore
from pipeline.config import load_config
from pipeline.graph import find_stage, pipeline_stages, plan
from tests.helpers import REPO

SMOKE = REPO / "configs" / "smoke.yaml"


@pytest.fixture
def config():
    return load_config(SMOKE)


@pytest.fixture
def store(tmp_path):
    return ArtifactStore(str(tmp_path / "store"))


def commit_everything(planned, store: ArtifactStore, names: set[str]) -> None:
    """Commit a stand-in artifact for each named stage under its planned key."""
    for item in planned:
        if item.stage.name in names:
            staging = store.staging_dir(item.stage.name, item.key)
            (staging / "out.txt").write_text(item.stage.name)
            store.commit(item.stage.name, item.key, staging, {"version": item.stage.version, "metrics": {}})


def running(planned) -> list[str]:
    return [item.stage.name for item in planned if item.will_run]


def test_every_stage_follows_its_upstream_and_is_keyed_on_theirs(config, store):
    planned = plan(config, store)
    order = [item.stage.name for item in planned]
    for item in planned:
        assert all(order.index(upstream) < order.index(item.stage.name) for upstream in item.stage.upstream)
        assert item.upstream_keys == {name: find_stage(planned, name).key for name in item.stage.upstream}
    assert running(planned) == order  # an empty store: everything runs


def test_until_stops_at_a_stage_or_at_every_stage_of_a_group(config, store):
    assert running(plan(config, store, until="bpe")) == ["download", "clean", "bpe"]
    models = [spec.name for spec in config.models]
    until_train = [item.stage.name for item in plan(config, store, until="train")]
    assert until_train[:4] == ["download", "clean", "bpe", "tokenize"]
    assert until_train[4:] == [f"train/{name}" for name in models]


def test_a_cached_stage_does_not_run_and_forcing_one_runs_it_and_its_downstream(config, store):
    planned = plan(config, store, until="tokenize")
    commit_everything(planned, store, {"download", "clean", "bpe", "tokenize"})
    assert running(plan(config, store, until="tokenize")) == []
    assert running(plan(config, store, until="tokenize", force=("bpe",))) == ["bpe", "tokenize"]
    # clean is forced: bpe and tokenize depend on it, download does not.
    assert running(plan(config, store, until="tokenize", force=("clean",))) == ["clean", "bpe", "tokenize"]


def test_forcing_a_group_forces_each_member_and_the_report(config, store):
    planned = plan(config, store)
    commit_everything(planned, store, {item.stage.name for item in planned})
    forced = running(plan(config, store, force=("train",)))
    assert forced == [name for name in (item.stage.name for item in planned)
                      if name.startswith(("train/", "evaluate/")) or name == "report"]


def test_keys_change_with_the_config_slice_and_propagate_downstream(config, store):
    before = {item.stage.name: item.key for item in plan(config, store)}
    changed = config.model_copy(update={"bpe": config.bpe.model_copy(update={"vocab_size": 999})})
    after = {item.stage.name: item.key for item in plan(changed, store)}
    assert [name for name in before if before[name] == after[name]] == ["download", "clean"]


def test_an_unknown_stage_is_refused_with_the_stages_there_are(config, store):
    with pytest.raises(ValueError, match="unknown stage 'bpee'; stages are: download, clean, bpe"):
        plan(config, store, force=("bpee",))
    assert [stage.name for stage in pipeline_stages(config)][-1] == "report"


BRANCHED = ["budgets=[1e11, 2e11, 4e11]", "branch_budgets=true", "seeds=[1]", "train.schedule=wsd",
            "train.lr=1e-3", 'models=[{name: t, family: transformer, preset: tiny}]']


def test_branched_budgets_share_one_stable_phase_as_a_chain_of_segments(store):
    planned = plan(load_config(SMOKE, BRANCHED), store)
    train = {item.stage.name: item for item in planned if item.stage.group == "train"}
    assert list(train) == ["train/t.1e11.s1.stable", "train/t.2e11.s1.stable", "train/t.4e11.s1.stable",
                           "train/t.1e11.s1", "train/t.2e11.s1", "train/t.4e11.s1"]
    assert train["train/t.1e11.s1.stable"].stage.upstream == ("tokenize",)
    assert train["train/t.2e11.s1.stable"].upstream_keys["train/t.1e11.s1.stable"] == \
        train["train/t.1e11.s1.stable"].key  # each segment continues the one before, by key
    for budget in ("1e11", "2e11", "4e11"):
        branch = train[f"train/t.{budget}.s1"]
        assert branch.upstream_keys[f"train/t.{budget}.s1.stable"] == train[f"train/t.{budget}.s1.stable"].key
        section = branch.stage.config_of(load_config(SMOKE, BRANCHED))
        assert section.start_from == f"train/t.{budget}.s1.stable" and not section.until_decay
    segment = train["train/t.2e11.s1.stable"].stage.config_of(load_config(SMOKE, BRANCHED))
    assert segment.until_decay and segment.start_from == "train/t.1e11.s1.stable"
    assert segment.train.max_train_flops == 2e11
    report = find_stage(planned, "report")
    assert not any(name.endswith(".stable") for name in report.stage.upstream)  # segments are not compared


def test_a_larger_budget_added_to_a_branched_sweep_reuses_every_key_before_it(store):
    before = {item.stage.name: item.key for item in plan(load_config(SMOKE, BRANCHED), store)}
    grown = [setting.replace("4e11]", "4e11, 8e11]") for setting in BRANCHED]
    after = {item.stage.name: item.key for item in plan(load_config(SMOKE, grown), store)}
    assert {name: key for name, key in after.items() if name.startswith("train/") and name in before} == \
           {name: key for name, key in before.items() if name.startswith("train/")}
    assert "train/t.8e11.s1.stable" in after and "train/t.8e11.s1" in after


def test_a_branched_run_is_keyed_apart_from_the_same_budget_trained_alone(store):
    alone = [setting for setting in BRANCHED if not setting.startswith("branch_budgets")]
    branched = {item.stage.name: item.key for item in plan(load_config(SMOKE, BRANCHED), store)}
    independent = {item.stage.name: item.key for item in plan(load_config(SMOKE, alone), store)}
    assert branched["train/t.2e11.s1"] != independent["train/t.2e11.s1"]
    assert not any(name.endswith(".stable") for name in independent)


@pytest.mark.parametrize("change, message", [
    ({"budgets": [1e11]}, "list at least two in 'budgets'"),
    ({"train": {"schedule": "cosine"}}, "branch_budgets needs train.schedule: wsd .* got 'cosine'"),
    ({"train": {"warmup_steps": None, "warmup_fraction": 0.1}}, "needs train.warmup_steps, not train.warmup_fraction"),
    ({"models": [{"name": "d", "family": "decoder_only", "preset": "tiny", "settings": {"ae_fraction": 0.5}}]},
     "model 'd': branch_budgets needs settings.ae_steps"),
])
def test_branched_budgets_refuse_what_would_split_the_stable_phase(change, message):
    from pydantic import ValidationError

    from pipeline.config import ExperimentConfig
    from tests.helpers import shipped_config

    raw = shipped_config("smoke.yaml")
    raw.update(budgets=[1e11, 2e11], branch_budgets=True, models=[{"name": "t", "family": "transformer",
                                                                   "preset": "tiny"}])
    raw["train"].update(schedule="wsd", lr=1e-3)
    for key, value in change.items():
        if key == "train":
            raw["train"].update(value)
            raw["train"] = {name: setting for name, setting in raw["train"].items() if setting is not None}
        else:
            raw[key] = value
    with pytest.raises(ValidationError, match=message):
        ExperimentConfig.model_validate(raw)


TUNED = ["train.schedule=wsd", "train.lr=1e-3", "tune={learning_rates: [3e-4, 1e-3, 3e-3], budget: 1e11}",
         'models=[{name: t, family: transformer, sizes: [w64, w128]}, '
         '{name: r, family: rnn, preset: tiny, train: {lr: 2e-3}}]']


def test_a_tune_section_chooses_each_size_s_rate_before_its_runs_and_a_set_rate_is_kept(store):
    config = load_config(SMOKE, TUNED)
    planned = {item.stage.name: item for item in plan(config, store)}
    assert [name for name in planned if name.startswith("tune/")] == ["tune/t.w64", "tune/t.w128"]
    for size in ("w64", "w128"):
        run = planned[f"train/t.{size}"]
        assert run.upstream_keys[f"tune/t.{size}"] == planned[f"tune/t.{size}"].key
        assert run.stage.config_of(config).lr_from == f"tune/t.{size}"
    assert planned["train/r"].stage.upstream == ("tokenize",)  # its own train.lr: not tuned
    assert planned["train/r"].stage.config_of(config).lr_from is None
    section = planned["tune/t.w64"].stage.config_of(config)
    assert section.model.preset == "w64" and section.tune.learning_rates == [3e-4, 1e-3, 3e-3]
    wider = load_config(SMOKE, [*TUNED[:2], "tune={learning_rates: [3e-4, 1e-3, 3e-3, 1e-2], budget: 1e11}",
                                TUNED[3]])
    rekeyed = {item.stage.name: item.key for item in plan(wider, store)}
    assert rekeyed["tune/t.w64"] != planned["tune/t.w64"].key and rekeyed["train/t.w64"] != planned["train/t.w64"].key
    assert rekeyed["train/r"] == planned["train/r"].key


PER_BUDGET = ["train.schedule=wsd", "budgets=[1e11, 4e11, 2e12]", "models=[{name: t, family: transformer, sizes: [w64]}]"]


def tuned_per_budget(fraction: float) -> list[str]:
    return [*PER_BUDGET, f"tune={{learning_rates: [3e-4, 1e-3], budget: 1e11, budget_fraction: {fraction}}}"]


def test_a_rate_tuned_per_budget_is_chosen_at_a_fraction_of_each_run_s_budget_within_bounds(store):
    config = load_config(SMOKE, tuned_per_budget(0.25))
    planned = {item.stage.name: item for item in plan(config, store)}
    # 1e11 and 4e11 both tune at 1e11 (their quarter is below tune.budget): one stage;
    # 2e12 at its quarter, 5e11.
    assert [name for name in planned if name.startswith("tune/")] == ["tune/t.w64.1e11", "tune/t.w64.5e11"]
    assert [planned[name].stage.config_of(config).tune.budget for name in ("tune/t.w64.1e11", "tune/t.w64.5e11")] \
        == [1e11, 5e11]
    for run, chosen_by in [("t.w64.1e11", "tune/t.w64.1e11"), ("t.w64.4e11", "tune/t.w64.1e11"),
                           ("t.w64.2e12", "tune/t.w64.5e11")]:
        assert planned[f"train/{run}"].stage.config_of(config).lr_from == chosen_by
        assert planned[f"train/{run}"].upstream_keys[chosen_by] == planned[chosen_by].key
    assert config.report_stage_config().tuned == ["tune/t.w64.1e11", "tune/t.w64.5e11"]
    # The fraction is not in a stage's key, its trial budget is: at a fifth, the 1e11
    # stage is the same artifact, and 2e12 tunes at 4e11 instead.
    fifth = {item.stage.name: item.key for item in plan(load_config(SMOKE, tuned_per_budget(0.2)), store)}
    assert fifth["tune/t.w64.1e11"] == planned["tune/t.w64.1e11"].key and "tune/t.w64.4e11" in fifth
    # A run's trials never train past the run's own budget.
    whole = load_config(SMOKE, tuned_per_budget(1.0))
    assert whole.tune_budget(whole.models[0], 4e11) == 4e11
    floor = load_config(SMOKE, [*tuned_per_budget(0.25)[:-1], "tune={learning_rates: [3e-4, 1e-3], budget: 1e12, "
                                "budget_fraction: 0.25}"])
    assert floor.tune_budget(floor.models[0], 4e11) == 4e11


def test_a_model_s_own_tune_keys_choose_its_rates_and_leave_the_other_models_stages_alone(store):
    shared = load_config(SMOKE, [*tuned_per_budget(0.25)[:-2], "models=[{name: t, family: transformer, sizes: [w64]}, "
                                 "{name: c, family: convs2s, sizes: [w16]}]", tuned_per_budget(0.25)[-1]])
    own = load_config(SMOKE, [*tuned_per_budget(0.25)[:-2], "models=[{name: t, family: transformer, sizes: [w64]}, "
                              "{name: c, family: convs2s, sizes: [w16], tune: {budget_fraction: 0.5}}]",
                              tuned_per_budget(0.25)[-1]])
    before = {item.stage.name: item.key for item in plan(shared, store)}
    after = {item.stage.name: item for item in plan(own, store)}
    # Its 2e12 runs tune at half their budget (1e12), its 4e11 runs at 2e11; the other
    # model's stages keep their names and keys.
    assert sorted(name for name in after if name.startswith("tune/c.")) == ["tune/c.w16.1e11", "tune/c.w16.1e12",
                                                                             "tune/c.w16.2e11"]
    assert after["tune/c.w16.1e12"].stage.config_of(own).tune.budget == 1e12
    assert after["train/c.w16.2e12"].stage.config_of(own).lr_from == "tune/c.w16.1e12"
    assert {name: key for name, key in before.items() if "/t." in name} == \
        {name: item.key for name, item in after.items() if "/t." in name}
    # The stage both configs share (1e11 trials) is the same artifact.
    assert after["tune/c.w16.1e11"].key == before["tune/c.w16.1e11"]


@pytest.mark.parametrize("override, message", [
    ("{budget_fraction: 2.0}", "model 'c': tune.budget_fraction: Input should be less than or equal to 1"),
    ("{budget_fracton: 0.5}", "model 'c': tune.budget_fracton: Extra inputs are not permitted"),
])
def test_a_model_s_tune_keys_are_checked_by_name(override, message):
    from pipeline.config import ConfigError

    with pytest.raises(ConfigError, match=message):
        load_config(SMOKE, [*tuned_per_budget(0.25)[:-2], f"models=[{{name: c, family: convs2s, sizes: [w16], "
                                                           f"tune: {override}}}]", tuned_per_budget(0.25)[-1]])
    with pytest.raises(ConfigError, match="model 'c': tune overrides the experiment's tune section"):
        load_config(SMOKE, [*PER_BUDGET[:-1], "models=[{name: c, family: convs2s, sizes: [w16], "
                                              "tune: {budget_fraction: 0.5}}]"])


def test_rates_tuned_per_budget_cannot_share_one_branched_stable_phase():
    from pipeline.config import ConfigError

    with pytest.raises(ConfigError, match="tune.budget_fraction chooses a rate per budget, but branch_budgets"):
        load_config(SMOKE, [*tuned_per_budget(0.25), "train.warmup_steps=5", "branch_budgets=true"])
    # A model's own fraction, under a section without one, is refused naming the model.
    with pytest.raises(ConfigError, match="model 't': tune.budget_fraction chooses a rate per budget"):
        load_config(SMOKE, [*PER_BUDGET[:-1], "models=[{name: t, family: transformer, sizes: [w64], "
                                              "tune: {budget_fraction: 0.25}}]",
                            "tune={learning_rates: [3e-4, 1e-3], budget: 1e11}", "train.warmup_steps=5",
                            "branch_budgets=true"])


@pytest.mark.parametrize("change, message", [
    ("tune={learning_rates: [1e-3, 1e-3], budget: 1e11}",
     "tune.learning_rates: Value error, needs at least two distinct rates"),
    ("tune={learning_rates: [1e-3, 0.0], budget: 1e11}", "tune.learning_rates: Value error, rates must be above 0"),
    ("train.schedule=noam", "model 't.w64': tune chooses train.lr, which schedule 'noam' does not use"),
])
def test_a_tune_section_refuses_a_grid_of_one_rate_and_a_schedule_without_a_peak_rate(change, message):
    from pipeline.config import ConfigError

    settings = [s for s in TUNED if s.split("=")[0] != change.split("=")[0]] + [change]
    with pytest.raises(ConfigError, match=message):
        load_config(SMOKE, settings)


def test_extra_seeds_train_at_their_budgets_only_and_branch_their_own_stable_phase(store):
    config = load_config(SMOKE, [s for s in BRANCHED if not s.startswith("seeds")] +
                         ["seeds=[1]", "extra_seeds={seeds: [2, 3], budgets: [2e11]}"])
    assert [run.name for run in config.trained_models()] == \
        ["t.1e11.s1", "t.2e11.s1", "t.2e11.s2", "t.2e11.s3", "t.4e11.s1"]
    segments = {segment.name: segment.start_from for segment in config.stable_segments()}
    assert segments["t.2e11.s2.stable"] is None and segments["t.4e11.s1.stable"] == "train/t.2e11.s1.stable"
    assert "t.1e11.s2.stable" not in segments and "t.4e11.s3.stable" not in segments
    grouped = config.report_stage_config().run_of
    assert grouped["t.2e11.s3"] == grouped["t.1e11.s1"] == "t"


@pytest.mark.parametrize("change, message", [
    (["seeds=[]"], "list the seeds every budget trains in 'seeds'"),
    (["extra_seeds={seeds: [2], budgets: [3e11]}"], r"extra_seeds.budgets 3e11 are not among 'budgets' \(1e11, 2e11, 4e11\)"),
    (["extra_seeds={seeds: [1, 2], budgets: [2e11]}"], r"extra_seeds.seeds \[1\] are in 'seeds' already"),
])
def test_extra_seeds_refuse_what_they_cannot_add(change, message):
    from pipeline.config import ConfigError

    base = [s for s in BRANCHED if not s.startswith("seeds")] + ["seeds=[1]",
                                                                   "extra_seeds={seeds: [2], budgets: [2e11]}"]
    settings = [s for s in base if s.split("=")[0] not in {c.split("=")[0] for c in change}] + change
    with pytest.raises(ConfigError, match=message):
        load_config(SMOKE, settings)


WINDOWED = [s for s in BRANCHED if not s.startswith("models")] + [
    'models=[{name: t, family: transformer, sizes: [w16, w32, w64], size_budgets: {w16: [1e11, 2e11], w64: [4e11]}}]']


def test_size_budgets_train_each_size_at_its_window_of_budgets_only(store):
    config = load_config(SMOKE, WINDOWED)
    assert [run.name for run in config.trained_models()] == [
        "t.w16.1e11.s1", "t.w16.2e11.s1", "t.w32.1e11.s1", "t.w32.2e11.s1", "t.w32.4e11.s1", "t.w64.4e11.s1"]
    segments = {segment.name: segment.start_from for segment in config.stable_segments()}
    # The small size's chain stops at its largest budget; the large one's starts at its smallest.
    assert "t.w16.4e11.s1.stable" not in segments and segments["t.w64.4e11.s1.stable"] is None
    # The window is not in the runs' keys: a size trained at a budget keeps its artifact when the window moves.
    planned = {item.stage.name: item for item in plan(config, store)}
    unwindowed = [s for s in BRANCHED if not s.startswith("models")] + [
        'models=[{name: t, family: transformer, sizes: [w16, w32, w64]}]']
    again = {item.stage.name: item for item in plan(load_config(SMOKE, unwindowed), store)}
    assert planned["train/t.w32.2e11.s1"].key == again["train/t.w32.2e11.s1"].key


@pytest.mark.parametrize("window, message", [
    ("{w24: [1e11]}", r"size_budgets names \['w24'\], which are not among sizes"),
    ("{w16: [3e11]}", r"size_budgets.w16: 3e11 not among 'budgets' \(1e11, 2e11, 4e11\)"),
    ("{w16: []}", r"size_budgets.w16: list at least one budget"),
])
def test_size_budgets_refuse_sizes_and_budgets_the_experiment_lacks(window, message):
    from pipeline.config import ConfigError

    with pytest.raises(ConfigError, match=message):
        load_config(SMOKE, [s for s in BRANCHED if not s.startswith("models")] + [
            f'models=[{{name: t, family: transformer, sizes: [w16, w32], size_budgets: {window}}}]'])
