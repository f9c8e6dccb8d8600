"""The CLI's front door: a bad config or stage name exits 2 before anything starts; ``nmt inspect``."""

from __future__ import annotations

import yaml
from typer.testing import CliRunner

from pipeline.cli import app
from tests.helpers import REPO, shipped_config


def test_cli_exits_2_and_starts_nothing_on_a_bad_config(tmp_path, monkeypatch):
    data = shipped_config("smoke.yaml")
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


def test_inspect_tables_every_model_of_a_config(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(app, ["inspect", str(REPO / "configs" / "wmt14_en_de.yaml")])
    assert result.exit_code == 0, result.output
    rows = {line.split("│")[1].strip(): line for line in result.output.splitlines() if line.startswith("│")}
    assert set(rows) == {"rnn_base", "transformer_base", "transformer_big", "decoder_only_base"}
    assert "│ 63.08M " in rows["transformer_base"] and "│ 214.25M " in rows["transformer_big"]
    assert "bpe.vocab_size from the config" in result.output  # no artifacts yet: config sizes


def test_inspect_gives_a_row_per_size_of_a_model_with_sizes(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(app, ["inspect", str(REPO / "configs" / "smoke.yaml"), "--set",
                                      "models=[{name: t, family: transformer, sizes: [w64, w256]}]"])
    assert result.exit_code == 0, result.output
    rows = {line.split("│")[1].strip(): line.split("│") for line in result.output.splitlines() if line.startswith("│")}
    assert set(rows) == {"t.w64", "t.w256"} and rows["t.w256"][3].strip() == "w256"
    # Millions, or thousands below a million.
    unit = {"M": 1e6, "k": 1e3}
    non_embedding = {name: float(row[6].strip()[:-1]) * unit[row[6].strip()[-1]] for name, row in rows.items()}
    assert rows["t.w64"][6].strip().endswith("k") and rows["t.w256"][6].strip().endswith("M")
    assert 12 < non_embedding["t.w256"] / non_embedding["t.w64"] < 20  # twice the width twice: about 16x


def test_serve_refuses_a_longest_batch_wait_shorter_than_the_wait(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(app, ["serve", str(tmp_path / "model.pt"), "--batch-wait-ms", "50",
                                      "--batch-max-wait-ms", "20"])
    assert result.exit_code == 2
    assert "--batch-max-wait-ms 20 is shorter than --batch-wait-ms 50" in result.output


def test_serve_refuses_an_unknown_ingress_and_haproxy_on_a_cluster_started_without_it(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("RAY_SERVE_ENABLE_HA_PROXY", raising=False)
    result = CliRunner().invoke(app, ["serve", str(tmp_path / "model.pt"), "--ingress", "nginx"])
    assert result.exit_code == 2
    assert "'nginx' is not one of 'ray'," in result.output and "'haproxy'" in result.output  # as --help lists
    monkeypatch.setattr("shutil.which", lambda name: f"/usr/sbin/{name}")  # as if haproxy were installed
    result = CliRunner().invoke(app, ["serve", str(tmp_path / "model.pt"), "--ingress", "haproxy",
                                      "--address", "127.0.0.1:6379"])
    assert result.exit_code == 2
    assert "start its nodes with RAY_SERVE_ENABLE_HA_PROXY=1" in result.output
    monkeypatch.setattr("shutil.which", lambda name: None)
    result = CliRunner().invoke(app, ["serve", str(tmp_path / "model.pt"), "--ingress", "haproxy"])
    assert result.exit_code == 2
    assert "no haproxy binary on PATH" in result.output
