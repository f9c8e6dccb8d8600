"""Fixtures every test may use; shared plain functions are in ``helpers.py``."""

from __future__ import annotations

import os
import shutil
import tempfile
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


def pytest_configure(config):
    """Ray's temporary directory of this suite's own (RAY_TMPDIR, read by Ray and by
    cluster/slurm.sbatch), made once by the controlling process and inherited by its
    workers: two suites on one machine share no ``ray_current_cluster`` file, no
    session directories and no Slurm job's ``ray-<job id>`` (the test clusters number
    their jobs from 1). Short, for Ray's socket paths (at most 107 bytes)."""
    if "RAY_TMPDIR" not in os.environ:
        os.environ["RAY_TMPDIR"] = tempfile.mkdtemp(prefix="nmt-", dir="/tmp")
        config.made_ray_tmpdir = os.environ["RAY_TMPDIR"]
    share_cpus_between_workers()


def share_cpus_between_workers() -> None:
    """Under ``-n N``, each pytest worker's torch (and, through OMP_NUM_THREADS, that of
    the processes it starts, where a stage does not set its threads itself) gets 1/N of
    the CPUs. Left at torch's default, every worker ran as many OpenMP threads as the
    machine has cores, and OpenMP's threads spin while they wait: two processes training
    side by side on 2 cores took 10 to 17 times as long as one alone, with one thread
    each 1.1 to 1.2 times (``python benchmarks/training/thread_sharing.py``, 2-core Zen 4:
    benchmarks/reports/2026-12-02_ci_times_epyc_zen4.md). The user's own OMP_NUM_THREADS wins."""
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    if workers < 2 or "OMP_NUM_THREADS" in os.environ:
        return
    threads = max(1, len(os.sched_getaffinity(0)) // workers)
    os.environ["OMP_NUM_THREADS"] = os.environ["MKL_NUM_THREADS"] = str(threads)
    import torch

    torch.set_num_threads(threads)


# The files that take minutes, longest first (seconds of setup, call and teardown on a
# 2-core CPU: benchmarks/reports/2026-12-02_ci_times_epyc_zen4.md). Under -n 2 each file
# runs whole on one worker, handed out in this order and the rest after them as
# collected (--no-loadscope-reorder): the longest first, the many short unit files last,
# filling in. Handed out by number of tests instead, the one-test files came last, and
# the Slurm test (three minutes) ran alone on one core at the end.
LONGEST_FIRST = [
    "e2e/test_train.py", "e2e/test_serve.py", "e2e/test_multinode.py", "e2e/test_pipeline.py",
    "e2e/test_concurrent_runs.py", "e2e/test_tune.py", "e2e/test_faults.py", "e2e/test_slurm.py",
    "unit/stages/shared/export/test_export.py", "e2e/test_evaluate_report.py", "e2e/test_ray_up.py",
    "e2e/test_gpu_study.py", "e2e/test_your_data.py", "e2e/test_admission.py", "e2e/test_object_store.py", "e2e/test_local_ray.py",
    "e2e/test_cluster_address.py",
]


def pytest_collection_modifyitems(config, items):
    """The tiers (README, docs/architecture.md): a unit test is ``fast`` unless it uses
    the local Ray instance or is marked ``trains``; the end-to-end tests are ``slow``.
    Then the files in LONGEST_FIRST's order, the rest after them as collected."""
    tests = Path(__file__).parent
    for item in items:
        in_unit = (tests / "unit") in Path(item.fspath).parents
        if in_unit and not item.get_closest_marker("trains") and "local_ray" not in item.fixturenames:
            item.add_marker(pytest.mark.fast)

    def rank(item) -> int:
        name = Path(item.fspath).relative_to(tests).as_posix()
        return LONGEST_FIRST.index(name) if name in LONGEST_FIRST else len(LONGEST_FIRST)

    items.sort(key=rank)  # stable: each file's tests keep their order


def pytest_unconfigure(config):
    made = getattr(config, "made_ray_tmpdir", None)
    if made:
        shutil.rmtree(made, ignore_errors=True)


@pytest.fixture(scope="session")
def local_ray():
    """One real local Ray instance for the whole session (starting one takes seconds),
    its State API where its own processes find it, as ``nmt run``'s."""
    import ray

    from pipeline.runner import API_SERVER_ENV, PREEMPTION_WATCHER_ENV, point_state_api_at_own_dashboard

    # As nmt run's own local instance: its processes inherit the watcher's setting, and
    # the tests' other commands do not. Its State API's address stays set, for this
    # process's own State API calls until the session ends; every cluster the tests
    # start from here names its own (tests/ray_cluster.py, tests/slurm_cluster.py).
    ours = PREEMPTION_WATCHER_ENV not in os.environ
    os.environ.setdefault(PREEMPTION_WATCHER_ENV, "0")
    ray.init(address="local", num_cpus=2, dashboard_port=point_state_api_at_own_dashboard(), log_to_driver=False)
    if ours:
        del os.environ[PREEMPTION_WATCHER_ENV]
    yield
    ray.shutdown()
    os.environ.pop(API_SERVER_ENV, None)


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
