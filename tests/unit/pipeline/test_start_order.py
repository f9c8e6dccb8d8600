"""The train stages' turns (pipeline/scheduler.py's WorkerTurns, whose rules are unit
tests there) reach the stages' tasks and workers through a Ray actor: on a real local
Ray instance, read from the actor's state, never from how long a wait took."""

import pytest

pytestmark = pytest.mark.usefixtures("local_ray")


def test_the_actor_keeps_the_turns_that_tasks_wait_for_and_workers_report_to():
    import ray

    from pipeline.start_order import StartOrder, TrainingTurn

    order = StartOrder.remote()
    for name in ("a", "b"):
        ray.get(order.enqueue.remote(name))
    first, second = TrainingTurn(order, "a"), TrainingTurn(order, "b")
    first.wait()  # nothing before the first: returns at once
    assert not ray.get(order.may_start.remote("b"))
    first.started()
    assert ray.get(order.may_start.remote("b"))
    second.wait()
