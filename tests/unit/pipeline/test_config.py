"""Config validation: every problem is one clear message naming file, line and key."""

from __future__ import annotations

import pytest
import yaml

from pipeline.config import ConfigError, load_config
from tests.helpers import REPO, shipped_config, write_config


@pytest.mark.parametrize("name", ["multi30k_en_de.yaml", "multi30k_en_de_1e13.yaml", "smoke.yaml", "wmt14_en_de.yaml"])
def test_shipped_configs_validate(name):
    config = load_config(REPO / "configs" / name)
    assert config.download.src_lang == "en" and config.download.tgt_lang == "de"


def test_unknown_key_names_file_line_key_and_close_match(tmp_path):
    data = shipped_config("smoke.yaml")
    data["tokenize"] = {"shard": 8}
    path = tmp_path / "typo.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    with pytest.raises(ConfigError) as error:
        load_config(path)
    message = str(error.value)
    line = path.read_text().splitlines().index("  shard: 8") + 1
    assert str(path) in message
    assert f"line {line}" in message
    assert "tokenize.shard: unknown key" in message
    assert "did you mean 'shards'?" in message
    assert "valid keys: append_eos, histogram_bin_width, shards" in message


def test_wrong_type_names_key_and_value(tmp_path):
    data = shipped_config("smoke.yaml")
    data["bpe"]["vocab_size"] = "lots"
    with pytest.raises(ConfigError, match=r"bpe\.vocab_size: .*integer.*'lots'"):
        load_config(write_config(tmp_path / "bad.yaml", data))


def test_a_rule_across_keys_is_stated_without_echoing_the_config(tmp_path):
    data = shipped_config("smoke.yaml")  # schedule: noam, which scales by lr_scale
    data["tune"] = {"learning_rates": [1e-3, 2e-3], "budget": 1e10}
    with pytest.raises(ConfigError) as error:
        load_config(write_config(tmp_path / "tuned.yaml", data))
    message = str(error.value)
    assert "tune chooses train.lr, which schedule 'noam' does not use" in message
    assert "(got {" not in message and "multi30k" not in message and len(message) < 600, message


def test_missing_required_key_is_named(tmp_path):
    data = shipped_config("smoke.yaml")
    del data["download"]["tgt_lang"]
    with pytest.raises(ConfigError, match=r"download\.tgt_lang: required key is missing"):
        load_config(write_config(tmp_path / "missing.yaml", data))


def test_unknown_key_inside_a_source_lists_source_keys(tmp_path):
    data = shipped_config("smoke.yaml")
    data["download"]["train"]["max_pair"] = 10
    with pytest.raises(ConfigError, match=r"download\.train\.max_pair: unknown key; did you mean 'max_pairs'"):
        load_config(write_config(tmp_path / "source.yaml", data))


def test_url_without_sha256_is_rejected(tmp_path):
    data = shipped_config("smoke.yaml")
    del data["download"]["valid"]["src"]["sha256"]
    with pytest.raises(ConfigError, match=r"download\.valid\.src: .*needs its 'sha256'"):
        load_config(write_config(tmp_path / "unpinned.yaml", data))


def test_missing_config_file():
    with pytest.raises(ConfigError, match="no_such.yaml: config file not found"):
        load_config("no_such.yaml")


def test_dotted_override_sets_typed_value():
    config = load_config(REPO / "configs" / "smoke.yaml", ["tokenize.shards=8", "clean.langid=true"])
    assert config.tokenize.shards == 8 and config.clean.langid is True


def test_override_of_unknown_key_says_it_came_from_set():
    with pytest.raises(ConfigError, match=r"from --set, tokenize\.shardz: unknown key; did you mean 'shards'"):
        load_config(REPO / "configs" / "smoke.yaml", ["tokenize.shardz=8"])


def test_a_long_value_is_quoted_cut_with_its_length_and_a_huge_config_is_refused_unread(tmp_path, monkeypatch):
    """A 120,000-character --set value was printed whole; a 10 MB string in a config
    printed a 10 MB error after 14 s."""
    with pytest.raises(ConfigError) as refused:
        load_config(REPO / "configs" / "smoke.yaml", ["tokenize.shards=" + "9" * 120_000 + "x"])
    message = str(refused.value)
    assert len(message) < 400 and "... (120,001 characters)" in message, message
    with pytest.raises(ConfigError) as refused:
        load_config(REPO / "configs" / "smoke.yaml", ["x" * 5000 + "=1"])
    assert len(str(refused.value)) < 600 and "... (5,000 characters)" in str(refused.value)
    huge = tmp_path / "huge.yaml"
    huge.write_text("experiment: " + "x" * (2 << 20) + "\n")

    def never(*args, **kwargs):
        raise AssertionError("a config over the size limit was parsed")

    monkeypatch.setattr(yaml, "load", never)
    with pytest.raises(ConfigError, match=r"huge\.yaml: 2,097,165 bytes, over the 1,048,576 a config may have"):
        load_config(huge)


def test_relative_paths_resolve_against_the_config_directory(tmp_path):
    data = shipped_config("smoke.yaml")
    data["download"]["train"] = {"type": "tsv", "file": {"path": "corpus/train.tsv"}}
    data["artifact_root"] = "runs"
    (tmp_path / "sub").mkdir()
    path = tmp_path / "sub" / "relative.yaml"
    path.write_text(yaml.safe_dump(data))
    config = load_config(path)
    assert config.download.train.file.path == str(tmp_path / "sub" / "corpus" / "train.tsv")
    # The artifact root too (the shipped configs' ../artifacts is the repository's);
    # an object store URI is left as written.
    assert config.artifact_root == str(tmp_path / "sub" / "runs")
    assert load_config(REPO / "configs" / "smoke.yaml").artifact_root == str(REPO / "artifacts")
    uri = "s3://bucket/prefix?endpoint_override=127.0.0.1:9"
    assert load_config(path, [f"artifact_root={uri}"]).artifact_root == uri


def test_model_preset_and_settings_are_validated(tmp_path):
    data = shipped_config("smoke.yaml")
    data["models"] = [{"name": "a", "family": "rnn", "preset": "tiny", "settings": {"hiden": 3}}]
    path = tmp_path / "models.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    with pytest.raises(ConfigError, match=r"models\.0: .*unknown rnn setting\(s\) hiden"):
        load_config(path)
    data["models"] = [{"name": "a", "family": "rnn", "preset": "tiny"}, {"name": "a", "family": "transformer"}]
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    with pytest.raises(ConfigError, match="model names must be unique; repeated: a"):
        load_config(path)


def test_how_work_is_spread_is_not_in_the_key_but_what_it_computes_is(tmp_path):
    from pipeline.core.artifacts import ArtifactStore
    from pipeline.graph import plan

    store = ArtifactStore(str(tmp_path / "artifacts"))
    config = REPO / "configs" / "smoke.yaml"

    def keys(*overrides):
        return {item.stage.name: item.key for item in plan(load_config(config, list(overrides)), store, "tokenize")}

    base = keys()
    assert keys("clean.rows_per_task=7") == base
    changed = keys("clean.max_words=60")
    assert changed["download"] == base["download"] and changed["clean"] != base["clean"]


def test_seeds_and_budgets_make_one_named_run_per_model_budget_and_seed(tmp_path):
    from pipeline.core.artifacts import ArtifactStore
    from pipeline.graph import plan

    smoke = REPO / "configs" / "smoke.yaml"
    plain = load_config(smoke)
    assert plain.trained_models() == plain.models and plain.report_stage_config().run_of == {}
    swept = load_config(smoke, ["seeds=[1, 2]", "budgets=[1e12, 2.5e12]"])
    runs = swept.trained_models()
    assert [run.name for run in runs if run.run_of == "rnn_tiny"] == [
        "rnn_tiny.1e12.s1", "rnn_tiny.1e12.s2", "rnn_tiny.2.5e12.s1", "rnn_tiny.2.5e12.s2"]
    trained = swept.train_stage_config(runs[3]).train
    assert (trained.seed, trained.max_train_flops) == (2, 2.5e12)
    assert swept.report_stage_config().run_of["transformer_tiny.2.5e12.s1"] == "transformer_tiny"

    # The runs a plain config trains keep their keys: run_of is not part of them.
    store = ArtifactStore(str(tmp_path / "artifacts"))
    keys = {item.stage.name: item.key for item in plan(plain, store)}
    seeded = {item.stage.name: item.key for item in plan(load_config(smoke, ["seeds=[1]"]), store)}
    assert keys["tokenize"] == seeded["tokenize"] and "train/rnn_tiny" in keys and "train/rnn_tiny.s1" in seeded
    assert keys["train/rnn_tiny"] != seeded["train/rnn_tiny.s1"]  # another name: another stage


def test_sizes_make_one_named_run_per_size_with_that_preset_and_the_shared_settings():
    config = load_config(REPO / "configs" / "smoke.yaml",
                         ['models=[{name: t, family: transformer, sizes: [w64, w256], settings: {pre_norm: true}}]',
                          "seeds=[1, 2]"])
    runs = config.trained_models()
    assert [(run.name, run.preset, run.run_of) for run in runs] == [
        ("t.w64.s1", "w64", "t.w64"), ("t.w64.s2", "w64", "t.w64"),
        ("t.w256.s1", "w256", "t.w256"), ("t.w256.s2", "w256", "t.w256")]
    assert all(run.settings == {"pre_norm": True} and "sizes" not in run.model_dump() for run in runs)


@pytest.mark.parametrize(("model", "message"), [
    ("{name: t, family: rnn, sizes: [w64, w2048]}", r"models.0: .*sizes \['w2048'\] are not rnn presets; presets are: "),
    ("{name: t, family: rnn, preset: tiny, sizes: [w64]}", "models.0: .*name the preset or the sizes, not both"),
    ("{name: t, family: rnn, sizes: [w64, w128], settings: {hidden: 96}}",
     r"models.0: .*settings \['hidden'\] would make every size the same"),
])
def test_sizes_a_family_lacks_or_that_settings_undo_are_refused_naming_the_model(model, message):
    with pytest.raises(ConfigError, match=message):
        load_config(REPO / "configs" / "smoke.yaml", [f"models=[{model}]"])


@pytest.mark.parametrize(("override", "message"), [
    ("seeds=[1, 1]", "seeds must be distinct"),
    ("budgets=[0]", "budgets are counted training FLOPs, each above 0"),
])
def test_repeated_seeds_and_empty_budgets_are_refused(override, message):
    with pytest.raises(ConfigError, match=message):
        load_config(REPO / "configs" / "smoke.yaml", [override])


def test_a_key_given_twice_names_file_both_lines_and_key(tmp_path):
    path = tmp_path / "twice.yaml"
    path.write_text("name: x\ntrain:\n  max_steps: 10\n  workers: 1\n  max_steps: 20\n")
    with pytest.raises(ConfigError, match=rf"{path}: line 5, column 3: .*duplicate key 'max_steps' \(first at line 3\)"):
        load_config(path)


def test_a_config_that_is_not_utf8_names_file_and_line(tmp_path):
    path = tmp_path / "latin1.yaml"
    path.write_bytes(b"name: x\n# caf\xe9\n")
    with pytest.raises(ConfigError, match=rf"{path}: line 2: not UTF-8 \(byte 0xe9\)"):
        load_config(path)


def test_the_frontier_study_has_the_shape_an_isoflop_study_needs():
    """configs/multi30k_frontier.yaml, the machinery's test on CPUs: every family at four
    budgets over 30x, a window of at least three sizes at each, tuned rates,
    three seeds at the second budget."""
    from pipeline.config import load_config
    from tests.helpers import REPO

    config = load_config(REPO / "configs" / "multi30k_frontier.yaml")
    assert sorted(model.family for model in config.models) == ["convs2s", "decoder_only", "rnn", "transformer"]
    assert len(config.budgets) >= 4 and max(config.budgets) / min(config.budgets) >= 30
    for model in config.models:
        for budget in config.budgets:
            window = [sized for sized in model.at_sizes() if budget in config.budgets_of(sized)]
            assert len(window) >= 3, f"{model.name} at {budget:g}: {len(window)} sizes"
    assert len(config.tuned_sizes()) == sum(len(model.sizes) for model in config.models)
    assert [len(config.seeds_at(budget)) for budget in sorted(config.budgets)] == [1, 3, 1, 1]


def test_the_gpu_study_spans_two_decades_with_every_rate_tuned_at_its_budget():
    """configs/wmt14_frontier_gpu.yaml: the four families at four or more budgets over two
    decades or more, five sizes around each, two seeds of every run, each run's rate
    chosen by trials as long as the run itself, on GPUs."""
    import math

    from pipeline.config import load_config
    from tests.helpers import REPO

    config = load_config(REPO / "configs" / "wmt14_frontier_gpu.yaml")
    assert sorted(model.family for model in config.models) == ["convs2s", "decoder_only", "rnn", "transformer"]
    assert len(config.budgets) >= 4 and math.log10(max(config.budgets) / min(config.budgets)) >= 2
    for model in config.models:
        for budget in config.budgets:
            assert len([s for s in model.at_sizes() if budget in config.budgets_of(s)]) >= 5, (model.name, budget)
    assert all(len(config.seeds_at(budget)) >= 2 for budget in config.budgets)
    runs = config.trained_models()
    assert {run.train["max_train_flops"] for run in runs} == set(config.budgets)
    trial_budgets = {name: budget for name, _, budget in config.tunings()}
    for run in runs:
        assert trial_budgets[run.lr_from] == run.train["max_train_flops"], run.name
    assert config.train.use_gpu and not config.branch_budgets


# The IsoFLOP study's measured optima, in non-embedding parameters, per family and budget
# where the minimum was interior (diverged sizes left out):
# benchmarks/reports/2026-11-30_isoflop_study_xeon_amx.md (the report's table "IsoFLOP
# profiles"). Kept in step with the report: when the study is re-run, its optima go
# here, and the windows must bracket them.
MEASURED_OPTIMA = {"transformer": {3.0e10: 4.63e3, 1.0e11: 13.62e3, 3.0e11: 42.56e3, 1.0e12: 85.81e3},
                   "decoder_only": {3.0e10: 3.51e3, 1.0e11: 8.14e3, 3.0e11: 22.04e3, 1.0e12: 59.17e3},
                   "convs2s": {3.0e10: 7.46e3, 1.0e11: 17.35e3, 3.0e11: 43.15e3, 1.0e12: 108.75e3},
                   "rnn": {3.0e10: 8.98e3, 1.0e11: 15.78e3, 3.0e11: 32.39e3, 1.0e12: 82.89e3}}


def test_the_frontier_study_s_windows_bracket_its_measured_optima():
    """Each budget's window of sizes in configs/multi30k_frontier.yaml spans the optimum
    the study measured there, in the count the report uses (torch-free, from the config)."""
    from pipeline.config import load_config
    from stages.shared.models.families import family
    from tests.helpers import REPO

    config = load_config(REPO / "configs" / "multi30k_frontier.yaml")
    vocab = config.bpe.vocab_size
    assert MEASURED_OPTIMA, "the study's optima are recorded"
    for model in config.models:
        record = family(model.family)
        for budget, optimum in MEASURED_OPTIMA.get(model.family, {}).items():
            if budget not in config.budgets:
                continue
            window = [record.parameter_layout(record.resolve(sized.preset, sized.settings), vocab, vocab)
                      .counts()["non_embedding"] for sized in model.at_sizes() if budget in config.budgets_of(sized)]
            assert min(window) < optimum < max(window), f"{model.name} at {budget:g}: {optimum:.3g} outside {window}"


def test_the_default_comparison_chooses_each_family_s_best_and_confirms_it_on_other_seeds():
    """configs/multi30k_en_de.yaml: the four families at two or more budgets spanning 3x
    or more, the largest at least 2e12 counted FLOPs, branched from one warmup-stable-decay
    run per candidate and seed; each family's size (three or more) and peak rate (two or
    more) chosen on a selection seed that then takes part in nothing compared, and three
    confirming seeds a side; the vocabulary the 2026-12-07 probe chose (4,000 pieces) and
    512-token batches."""
    from pipeline.config import load_config
    from tests.helpers import REPO

    default = load_config(REPO / "configs" / "multi30k_en_de.yaml")
    assert sorted(model.family for model in default.models) == ["convs2s", "decoder_only", "rnn", "transformer"]
    budgets = sorted(default.budgets)
    assert len(budgets) >= 2 and budgets[-1] / budgets[0] >= 3 and budgets[-1] >= 2e12
    assert default.branch_budgets and default.train.schedule == "wsd"
    assert len(default.seeds) >= 3 and not set(default.seeds) & set(default.select.seeds)
    assert all(len(model.sizes) >= 3 and len(default.select_rates(model)) >= 2 for model in default.models)
    assert (default.bpe.vocab_size, default.train.max_tokens) == (4000, 512)
    assert default.train.precision == "auto" and not any("precision" in model.train for model in default.models)


@pytest.mark.parametrize("override, said", [
    ("name=" + "x" * 600, "name: String should have at most 500 characters"),  # MLflow's limit, met at its start
    ("models=[{name: " + "m" * 300 + ", family: rnn, preset: tiny}]", "at most 100 characters"),  # a folder's name
    ("seeds=" + "[" * 5000 + "]" * 5000, "--set seeds: the value is nested too deeply to read"),  # a RecursionError
    ("seeds=[1, 2", "--set seeds: the value is not YAML"),
])
def test_limits_a_later_library_would_meet_are_refused_when_the_config_loads(override, said):
    with pytest.raises(ConfigError) as refused:
        load_config(REPO / "configs" / "smoke.yaml", [override])
    assert said in " ".join(str(refused.value).split())
