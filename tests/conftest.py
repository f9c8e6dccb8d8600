"""Fixtures every test may use; shared plain functions are in ``helpers.py``."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.helpers import MULTI30K, clean_slice


@pytest.fixture(scope="session")
def multi30k() -> Path:
    """The shared corpus. Absent, the tests that need it skip with the reason, except in
    CI (CI=true), where a missing corpus must fail rather than pass by skipping."""
    if not (MULTI30K / "train.en.gz").is_file():
        reason = f"Multi30k not found at {MULTI30K}; set NMT_CORPORA to the directory holding multi30k/"
        if os.environ.get("CI", "").lower() in ("true", "1"):
            pytest.fail(reason)
        pytest.skip(reason)
    return MULTI30K


@pytest.fixture(autouse=True)
def isolated_cache(tmp_path, monkeypatch):
    """Downloads and remote-artifact caches go to the test's own directory."""
    monkeypatch.setenv("NMT_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("NMT_MIRROR", raising=False)


@pytest.fixture(autouse=True)
def fast_retries(monkeypatch):
    """Download retries keep their count but not their seconds of backoff."""
    monkeypatch.setattr("stages.download.http.RETRY_BACKOFF_S", 0.01)


@pytest.fixture(scope="session")
def local_ray():
    """One real local Ray instance for the whole session (starting one takes seconds),
    its State API where its own processes find it, as ``nmt run``'s."""
    import ray

    from pipeline.runner import PREEMPTION_WATCHER_ENV, point_state_api_at_own_dashboard

    # As nmt run's own local instance: its processes inherit the setting, and the tests'
    # other commands (a cluster's driver among them) do not.
    ours = PREEMPTION_WATCHER_ENV not in os.environ
    os.environ.setdefault(PREEMPTION_WATCHER_ENV, "0")
    ray.init(address="local", num_cpus=2, dashboard_port=point_state_api_at_own_dashboard(), log_to_driver=False)
    if ours:
        del os.environ[PREEMPTION_WATCHER_ENV]
    yield
    ray.shutdown()


@pytest.fixture(scope="session")
def tokenized(multi30k, tmp_path_factory) -> Path:
    """A tokenize artifact of a Multi30k slice (1,500 training pairs, joint 500-piece BPE)."""
    from pipeline.core.context import StageContext
    from stages import bpe, tokenize
    from stages.bpe.config import BpeConfig
    from stages.tokenize.config import TokenizeConfig

    root = tmp_path_factory.mktemp("tokenized")
    clean = clean_slice(multi30k, root, {"train": 1500, "val": 100, "test_2016_flickr": 100})
    (root / "bpe").mkdir()
    bpe.run({"clean": clean}, BpeConfig(vocab_size=500), root / "bpe", StageContext())
    (root / "tokenize").mkdir()
    tokenize.run({"clean": clean, "bpe": root / "bpe"}, TokenizeConfig(shards=2), root / "tokenize",
                    StageContext())
    return root / "tokenize"
