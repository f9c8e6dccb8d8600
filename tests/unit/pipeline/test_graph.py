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
