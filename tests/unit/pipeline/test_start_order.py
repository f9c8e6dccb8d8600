"""Train stages ask for their workers in the order submitted (pipeline/start_order.py),
on a real local Ray instance. The order is read from the actor's state, never from how
long a wait took."""

import pytest

pytestmark = pytest.mark.usefixtures("local_ray")


def may_start(order, name: str) -> bool:
    import ray

    return ray.get(order.may_start.remote(name))


def submitted(start_order, names: list[str]):
    import ray

    order = start_order.remote()
    for name in names:
        ray.get(order.enqueue.remote(name))
    return order


def test_a_stage_may_start_once_every_stage_before_it_has_started():
    from pipeline.start_order import StartOrder, TrainingTurn

    order = submitted(StartOrder, ["decoder_only", "transformer", "rnn"])
    first, second, third = (TrainingTurn(order, name) for name in ("decoder_only", "transformer", "rnn"))
    first.wait()  # nothing before the first: returns at once
    assert not may_start(order, "transformer") and not may_start(order, "rnn")
    first.started()
    assert may_start(order, "transformer") and not may_start(order, "rnn")  # the second has not started
    second.wait()
    second.started()
    assert may_start(order, "rnn")
    third.wait()


def test_marking_a_stage_twice_and_out_of_order_is_harmless():
    from pipeline.start_order import StartOrder, TrainingTurn

    order = submitted(StartOrder, ["a", "b"])
    a, b = TrainingTurn(order, "a"), TrainingTurn(order, "b")
    b.started()  # ended before its turn (it failed before asking for workers)
    assert not may_start(order, "b")  # its own mark does not let it past "a"
    a.started()
    a.started()  # a worker restarted by Ray Train reports again
    assert may_start(order, "b")
    b.wait()


def test_a_stage_not_yet_submitted_waits_and_the_submission_order_counts():
    """Admission may submit a stage later than the config lists it (a branched budget
    waits for its segment): the order is the runner's, not the config's."""
    import ray

    from pipeline.start_order import StartOrder, TrainingTurn

    order = submitted(StartOrder, ["a"])
    assert not may_start(order, "b")  # its task asked before the runner's enqueue arrived
    ray.get([order.enqueue.remote("c")])
    ray.get([order.enqueue.remote("b")])
    TrainingTurn(order, "a").started()
    assert may_start(order, "c") and not may_start(order, "b")
