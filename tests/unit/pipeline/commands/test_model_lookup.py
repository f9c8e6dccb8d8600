"""Which trained model ``CONFIG --model NAME`` names (translate, export, attention,
serve; pipeline/commands/translate.py ``trained_artifact``), and ``nmt translate DIR``
for a stage's folder of keyed artifacts. Stand-in artifacts committed to a real store:
what is tested is the lookup, not the model."""

from __future__ import annotations

import pytest
import typer

from pipeline import run_settings
from pipeline.commands.translate import trained_artifact
from pipeline.config import load_config
from pipeline.core.artifacts import ArtifactStore
from pipeline.graph import plan
from tests.helpers import REPO

SMOKE = REPO / "configs" / "smoke.yaml"
TWO_SEEDS = ["seeds=[1, 2]"]


def commit_trained(store: ArtifactStore, overrides: list[str], model: str) -> str:
    """A stand-in train artifact of ``model`` under the config with ``overrides``; its key."""
    (item,) = [item for item in plan(load_config(SMOKE, overrides), store) if item.stage.name == f"train/{model}"]
    staging = store.staging_dir(item.stage.name, item.key)
    (staging / "model.pt").write_bytes(b"stand-in")
    store.commit(item.stage.name, item.key, staging, {"version": item.stage.version, "metrics": {}})
    return item.key


def test_a_model_trained_with_set_is_found_with_the_same_set_or_the_last_run_s(tmp_path):
    store = ArtifactStore(str(tmp_path / "store"))
    key = commit_trained(store, TWO_SEEDS, "transformer_tiny.s1")
    # With the same --set: found.
    assert trained_artifact(SMOKE, "transformer_tiny.s1", store.root, TWO_SEEDS)[1:] == ("train/transformer_tiny.s1",
                                                                                       key)
    # Without, before any run recorded its --set: the config as written has no such model.
    with pytest.raises(typer.Exit) as refused:
        trained_artifact(SMOKE, "transformer_tiny.s1", store.root)
    assert refused.value.exit_code == 2
    # Once nmt run recorded them, the plain command finds it.
    run_settings.record(store, "smoke", TWO_SEEDS)
    assert trained_artifact(SMOKE, "transformer_tiny.s1", store.root)[1:] == ("train/transformer_tiny.s1", key)
    # A model of the config as written that is not trained is still "not trained yet".
    with pytest.raises(typer.Exit) as untrained:
        trained_artifact(SMOKE, "rnn_tiny", store.root)
    assert untrained.value.exit_code == 1


def test_an_override_holding_a_credential_is_not_recorded(tmp_path):
    store = ArtifactStore(str(tmp_path / "store"))
    secret = "artifact_root=s3://bucket/prefix?access_key=AKIAEXAMPLE&secret_key=SECRETVALUE"
    run_settings.record(store, "smoke", [*TWO_SEEDS, secret])
    assert run_settings.recorded(store, "smoke") == TWO_SEEDS
    assert "SECRETVALUE" not in next((tmp_path / "store" / run_settings.FOLDER).iterdir()).read_text()
    assert run_settings.recorded(store, "another") == []


def test_a_stage_folder_with_one_keyed_model_is_that_model_and_with_several_names_them(tmp_path):
    from stages.shared.inference.model_file import ModelFiles

    folder = tmp_path / "train" / "transformer_tiny"
    for key in ("aaa", "bbb"):
        (folder / key).mkdir(parents=True)
    (folder / "aaa" / "model.pt").write_bytes(b"x")
    with pytest.raises(FileNotFoundError, match="vocab.json: missing"):  # found the model, then its vocabulary
        ModelFiles.find(folder)
    (folder / "bbb" / "model.pt").write_bytes(b"x")
    with pytest.raises(FileNotFoundError, match=r"holds 2 trained models, one per set of settings: name one of"):
        ModelFiles.find(folder)
