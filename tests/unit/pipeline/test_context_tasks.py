"""Fanning out through ``ctx.tasks``: results in order, with a bounded number in flight,
and how RayTasks deals tasks over the nodes (the node views and the remote call replaced,
the dealing the real code)."""

from __future__ import annotations

import pytest

from pipeline.core import context
from pipeline.core.context import MAX_TASKS_IN_FLIGHT, InlineTasks, RayTasks, StageContext, in_order


class CountingTasks(InlineTasks):
    """Inline tasks that record how many were submitted and not yet taken."""

    def __init__(self):
        self.outstanding, self.most = 0, 0

    def submit(self, fn, *args, num_returns=1, gpus=0):
        self.outstanding += 1
        self.most = max(self.most, self.outstanding)
        return super().submit(fn, *args)

    def result(self, future):
        self.outstanding -= 1
        return future


def test_in_order_yields_every_result_in_order_with_at_most_window_outstanding():
    tasks = CountingTasks()
    results = []
    for value in in_order(tasks, lambda x: x * x, range(20), window=3):
        assert tasks.outstanding <= 3  # what the caller holds un-taken while it works
        results.append(value)
    assert results == [x * x for x in range(20)] and tasks.most == 3 and tasks.outstanding == 0


def test_the_window_follows_the_cluster_but_is_capped():
    class BigCluster(InlineTasks):
        def parallelism(self):
            return 1024

    assert StageContext().task_window() == 2
    assert StageContext(tasks=BigCluster()).task_window() == MAX_TASKS_IN_FLIGHT


def test_parallel_map_keeps_order_and_passes_gpus_through():
    seen = []

    class Recording(InlineTasks):
        def submit(self, fn, *args, num_returns=1, gpus=0):
            seen.append(gpus)
            return super().submit(fn, *args)

    assert StageContext(tasks=Recording()).parallel_map(str, [3, 1, 2], gpus=1) == ["3", "1", "2"]
    assert seen == [1, 1, 1]


A, B, C = ("a" * 56, "b" * 56, "c" * 56)  # node IDs as Ray writes them (28 bytes in hex)


@pytest.fixture
def dealt(monkeypatch):
    """(node, soft, spill) of every submitted task; the views are set per test."""
    calls = []

    class Remote:
        def options(self, scheduling_strategy, **_):
            calls.append(scheduling_strategy)
            return self

        def remote(self, *args):
            return None

    monkeypatch.setattr(context, "_remote", lambda fn: Remote())
    return calls


def _views(monkeypatch, live, free):
    monkeypatch.setattr(context, "_nodes_with", lambda cpus, gpus: sorted(live))
    monkeypatch.setattr(context, "_nodes_free", lambda cpus, gpus: set(free))


def test_tasks_go_round_robin_over_the_free_nodes_and_cpu_tasks_never_spill(monkeypatch, dealt):
    _views(monkeypatch, live=[A, B, C], free=[A, B, C])
    tasks = RayTasks()
    for _ in range(6):
        tasks.submit(print)
    assert [strategy.node_id for strategy in dealt] == [A, B, C, A, B, C]
    assert all(strategy.soft and not strategy._spill_on_unavailable for strategy in dealt)


def test_busy_nodes_are_skipped_while_another_is_free_and_gpu_tasks_spill(monkeypatch, dealt):
    _views(monkeypatch, live=[A, B], free=[B])
    tasks = RayTasks()
    tasks.submit(print, gpus=1)
    tasks.submit(print, gpus=1)
    assert [strategy.node_id for strategy in dealt] == [B, B]
    assert all(strategy._spill_on_unavailable for strategy in dealt)
    _views(monkeypatch, live=[A, B], free=[])  # none free: every live node, fewest sent first
    tasks.submit(print)
    assert dealt[-1].node_id == A


def test_no_node_with_the_resources_leaves_the_task_to_ray(monkeypatch, dealt):
    _views(monkeypatch, live=[], free=[])
    RayTasks().submit(print, gpus=1)
    assert dealt == ["SPREAD"]
