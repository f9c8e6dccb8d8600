"""Config validation: every problem is one clear message naming file, line and key."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from pipeline.cli import app
from pipeline.config import ConfigError, load_config

REPO = Path(__file__).resolve().parents[1]


def _shipped(name: str) -> dict:
    return yaml.safe_load((REPO / "configs" / name).read_text())


@pytest.mark.parametrize("name", ["multi30k_en_de.yaml", "smoke.yaml", "wmt14_en_de.yaml"])
def test_shipped_configs_validate(name):
    config = load_config(REPO / "configs" / name)
    assert config.download.src_lang == "en" and config.download.tgt_lang == "de"


def test_unknown_key_names_file_line_key_and_close_match(tmp_path):
    data = _shipped("smoke.yaml")
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
    data = _shipped("smoke.yaml")
    data["bpe"]["vocab_size"] = "lots"
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(data))
    with pytest.raises(ConfigError, match=r"bpe\.vocab_size: .*integer.*'lots'"):
        load_config(path)


def test_missing_required_key_is_named(tmp_path):
    data = _shipped("smoke.yaml")
    del data["download"]["tgt_lang"]
    path = tmp_path / "missing.yaml"
    path.write_text(yaml.safe_dump(data))
    with pytest.raises(ConfigError, match=r"download\.tgt_lang: required key is missing"):
        load_config(path)


def test_unknown_key_inside_a_source_lists_source_keys(tmp_path):
    data = _shipped("smoke.yaml")
    data["download"]["train"]["max_pair"] = 10
    path = tmp_path / "source.yaml"
    path.write_text(yaml.safe_dump(data))
    with pytest.raises(ConfigError, match=r"download\.train\.max_pair: unknown key; did you mean 'max_pairs'"):
        load_config(path)


def test_url_without_sha256_is_rejected(tmp_path):
    data = _shipped("smoke.yaml")
    del data["download"]["valid"]["src"]["sha256"]
    path = tmp_path / "unpinned.yaml"
    path.write_text(yaml.safe_dump(data))
    with pytest.raises(ConfigError, match=r"download\.valid\.src: .*needs its 'sha256'"):
        load_config(path)


def test_missing_config_file():
    with pytest.raises(ConfigError, match="no_such.yaml: config file not found"):
        load_config("no_such.yaml")


def test_dotted_override_sets_typed_value():
    config = load_config(REPO / "configs" / "smoke.yaml", ["tokenize.shards=8", "clean.langid=true"])
    assert config.tokenize.shards == 8 and config.clean.langid is True


def test_override_of_unknown_key_says_it_came_from_set():
    with pytest.raises(ConfigError, match=r"from --set, tokenize\.shardz: unknown key; did you mean 'shards'"):
        load_config(REPO / "configs" / "smoke.yaml", ["tokenize.shardz=8"])


def test_relative_paths_resolve_against_the_config_directory(tmp_path):
    data = _shipped("smoke.yaml")
    data["download"]["train"] = {"type": "tsv", "file": {"path": "corpus/train.tsv"}}
    (tmp_path / "sub").mkdir()
    path = tmp_path / "sub" / "relative.yaml"
    path.write_text(yaml.safe_dump(data))
    config = load_config(path)
    assert config.download.train.file.path == str(tmp_path / "sub" / "corpus" / "train.tsv")


def test_cli_exits_2_and_starts_nothing_on_a_bad_config(tmp_path, monkeypatch):
    data = _shipped("smoke.yaml")
    data["bpe"]["vocab"] = 100
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(data))
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(app, ["run", str(path), "--artifact-root", str(tmp_path / "artifacts")])
    assert result.exit_code == 2
    assert "bpe.vocab: unknown key" in result.output
    assert not (tmp_path / "artifacts").exists() and not (tmp_path / "mlflow.db").exists()


def test_cli_rejects_unknown_stage_with_exit_2(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(app, ["run", str(REPO / "configs" / "smoke.yaml"), "--until", "tokenise"])
    assert result.exit_code == 2
    assert "unknown stage 'tokenise'" in result.output


def test_model_preset_and_settings_are_validated(tmp_path):
    data = _shipped("smoke.yaml")
    data["models"] = [{"name": "a", "family": "rnn", "preset": "tiny", "settings": {"hiden": 3}}]
    path = tmp_path / "models.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    with pytest.raises(ConfigError, match=r"models\.0: .*unknown rnn setting\(s\) hiden"):
        load_config(path)
    data["models"] = [{"name": "a", "family": "rnn", "preset": "tiny"}, {"name": "a", "family": "transformer"}]
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    with pytest.raises(ConfigError, match="model names must be unique; repeated: a"):
        load_config(path)


def test_inspect_tables_every_model_of_a_config(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(app, ["inspect", str(REPO / "configs" / "wmt14_en_de.yaml")])
    assert result.exit_code == 0, result.output
    rows = {line.split("│")[1].strip(): line for line in result.output.splitlines() if line.startswith("│")}
    assert set(rows) == {"rnn_base", "transformer_base", "transformer_big", "decoder_only_base"}
    assert "│ 63.08M " in rows["transformer_base"] and "│ 214.25M " in rows["transformer_big"]
    assert "bpe.vocab_size from the config" in result.output  # no artifacts yet: config sizes
