"""Train stages ask for their workers in the config's order (pipeline/start_order.py),
on a real local Ray instance. The order is read from the actor's state, never from how
long a wait took."""

import pytest

pytestmark = pytest.mark.usefixtures("local_ray")


def may_start(order, name: str) -> bool:
    import ray

    return ray.get(order.may_start.remote(name))


def test_a_stage_may_start_once_every_stage_before_it_has_started():
    from pipeline.start_order import StartOrder, TrainingTurn

    order = StartOrder.remote(["decoder_only", "transformer", "rnn"])
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

    order = StartOrder.remote(["a", "b"])
    a, b = TrainingTurn(order, "a"), TrainingTurn(order, "b")
    b.started()  # ended before its turn (it failed before asking for workers)
    assert not may_start(order, "b")  # its own mark does not let it past "a"
    a.started()
    a.started()  # a worker restarted by Ray Train reports again
    assert may_start(order, "b")
    b.wait()
