"""Train stages ask for their workers in the config's order (pipeline/start_order.py),
on a real local Ray instance."""

import threading

import pytest

pytestmark = pytest.mark.usefixtures("local_ray")


def waiting(turn) -> threading.Event:
    """An event set once ``turn.wait()`` returns in a thread of its own."""
    done = threading.Event()
    threading.Thread(target=lambda: (turn.wait(), done.set()), daemon=True).start()
    return done


def test_a_stage_waits_until_every_stage_before_it_has_started():
    from pipeline.start_order import StartOrder, TrainingTurn

    order = StartOrder.remote(["decoder_only", "transformer", "rnn"])
    first, second, third = (TrainingTurn(order, name) for name in ("decoder_only", "transformer", "rnn"))
    assert waiting(first).wait(timeout=10)  # nothing before the first
    second_done, third_done = waiting(second), waiting(third)
    assert not second_done.wait(timeout=1.5)
    first.started()
    assert second_done.wait(timeout=10)
    assert not third_done.wait(timeout=1.5)  # the first has started, the second not yet
    second.started()
    assert third_done.wait(timeout=10)


def test_marking_a_stage_twice_and_out_of_order_is_harmless():
    from pipeline.start_order import StartOrder, TrainingTurn

    order = StartOrder.remote(["a", "b"])
    a, b = TrainingTurn(order, "a"), TrainingTurn(order, "b")
    b.started()  # ended before its turn (it failed before asking for workers)
    assert not waiting(b).wait(timeout=1.5)  # its own mark does not let it past "a"
    a.started()
    a.started()  # a worker restarted by Ray Train reports again
    assert waiting(b).wait(timeout=10)
