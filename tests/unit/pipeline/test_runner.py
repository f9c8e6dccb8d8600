"""Failure attribution in the runner (pipeline/runner.py): a stage that did not run
because its upstream failed is reported as such, whatever order Ray reports them in."""

from __future__ import annotations

import pytest

from pipeline.runner import _failed_upstream
from pipeline.stage import Stage


def _succeed():
    return "ok"


def _fail():
    raise RuntimeError("boom")


def stage_with(upstream: tuple[str, ...]) -> Stage:
    return Stage(name="downstream", run=lambda *args: {}, config_of=lambda config: None, version=1,
                 upstream=upstream)


@pytest.fixture
def refs(local_ray):
    import ray

    succeeded, failed = ray.remote(_succeed).remote(), ray.remote(_fail).remote()
    ray.wait([succeeded, failed], num_returns=2)  # both settled: the state queried, not a timer
    return {"clean": succeeded, "bpe": failed}


def test_the_failed_direct_upstream_is_named(refs):
    assert _failed_upstream(stage_with(("clean", "bpe")), refs) == "bpe"


def test_upstreams_that_succeeded_or_were_cached_are_not_blamed(refs):
    assert _failed_upstream(stage_with(("clean",)), refs) is None
    assert _failed_upstream(stage_with(("download",)), refs) is None  # cached: no task in this run


def test_a_stage_that_failed_because_its_upstream_did_is_reported_as_not_run(local_ray):
    """Ray gives a dependent task its upstream's exception and may report the dependent
    first; the failure must still be pinned on the upstream stage."""
    import ray

    from pipeline.graph import DATA_STAGES
    from pipeline.runner import _failed_upstream

    @ray.remote
    def fails():
        raise ValueError("bpe broke")

    @ray.remote
    def succeeds():
        return 1

    @ray.remote
    def downstream(*_upstream):
        return 2

    tokenize = next(stage for stage in DATA_STAGES if stage.name == "tokenize")
    refs = {"clean": succeeds.remote(), "bpe": fails.remote()}
    dependent = downstream.remote(refs["clean"], refs["bpe"])
    with pytest.raises(ray.exceptions.RayTaskError):
        ray.get(dependent)
    assert _failed_upstream(tokenize, refs) == "bpe"
    assert _failed_upstream(tokenize, {"clean": refs["clean"]}) is None
