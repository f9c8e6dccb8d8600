"""Fanning out through ``ctx.tasks``: results in order, with a bounded number in flight."""

from __future__ import annotations

from pipeline.context import MAX_TASKS_IN_FLIGHT, InlineTasks, StageContext, in_order


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
