"""Which stages start when (pipeline/scheduler.py), rule by rule, without Ray: the
scheduler is told what ended and answers what may start."""

from __future__ import annotations

import pytest

from pipeline.scheduler import Job, Scheduler, WorkerTurns

CPU = {"CPU": 1.0}


def names(jobs: list[Job]) -> list[str]:
    return [job.name for job in jobs]


def test_a_stage_starts_once_its_upstream_stages_of_this_run_are_submitted():
    """Ray holds a task until its inputs exist: a chain is submitted at once, in plan
    order; an upstream stage that was cached (not in the run) holds nothing up."""
    scheduler = Scheduler([Job("clean", ("download",)), Job("bpe", ("clean",)), Job("tokenize", ("bpe", "clean"))],
                          {})
    assert names(scheduler.startable()) == ["clean", "bpe", "tokenize"]
    assert scheduler.startable() == []  # each once


def test_a_stage_listed_before_its_upstream_waits_for_the_next_pass():
    scheduler = Scheduler([Job("evaluate/a", ("train/a",)), Job("train/a", ())], {})
    assert names(scheduler.startable()) == ["train/a"]
    assert names(scheduler.startable()) == ["evaluate/a"]


def test_a_stage_that_holds_workers_waits_for_its_upstream_stages_to_end():
    """A branched budget continues another train stage: submitted beside it, it would
    hold its claim idle."""
    scheduler = Scheduler([Job("tokenize", ()), Job("train/a", ("tokenize",), CPU),
                           Job("train/a.long", ("train/a",), CPU)], {"CPU": 2.0})
    assert names(scheduler.startable()) == ["tokenize"]
    scheduler.end("tokenize")
    assert names(scheduler.startable()) == ["train/a"]  # room for the second, but its upstream runs
    scheduler.end("train/a")
    assert names(scheduler.startable()) == ["train/a.long"]


def test_claims_are_admitted_while_they_fit_and_the_next_when_one_ends():
    scheduler = Scheduler([Job(f"train/{name}", (), CPU) for name in "abc"], {"CPU": 2.0})
    assert names(scheduler.startable()) == ["train/a", "train/b"]
    assert scheduler.startable() == []
    scheduler.end("train/b")  # a failure ends a stage as a success does
    assert names(scheduler.startable()) == ["train/c"]


def test_once_a_claim_does_not_fit_the_ones_behind_it_wait_but_stages_without_claims_start():
    """In plan order: a smaller run behind a large one does not overtake it (which could
    go on forever); an evaluate stage holds no workers and is not held up."""
    scheduler = Scheduler([Job("train/small", (), CPU), Job("train/large", (), {"CPU": 2.0}),
                           Job("train/other", (), CPU), Job("evaluate/x", ())], {"CPU": 2.0})
    assert names(scheduler.startable()) == ["train/small", "evaluate/x"]
    scheduler.end("train/small")
    assert names(scheduler.startable()) == ["train/large"]
    scheduler.end("train/large")
    assert names(scheduler.startable()) == ["train/other"]


def test_a_claim_waiting_for_its_upstream_does_not_block_the_ones_behind_it():
    scheduler = Scheduler([Job("train/a", (), CPU), Job("train/a.long", ("train/a",), CPU),
                           Job("train/b", (), CPU)], {"CPU": 2.0})
    assert names(scheduler.startable()) == ["train/a", "train/b"]


def test_a_claim_larger_than_the_cluster_starts_alone():
    """A GPU the cluster lacks: started once nothing else holds workers, it waits in Ray
    as it would have."""
    scheduler = Scheduler([Job("train/cpu", (), CPU), Job("train/gpu", (), {"CPU": 1.0, "GPU": 1.0})],
                          {"CPU": 2.0})
    assert names(scheduler.startable()) == ["train/cpu"]
    scheduler.end("train/cpu")
    assert names(scheduler.startable()) == ["train/gpu"]


def test_stages_left_waiting_with_nothing_running_are_reported():
    """A plan whose stages wait on each other (a bug in the graph) ends in an error,
    not in a run that waits for ever."""
    scheduler = Scheduler([Job("bpe", ("clean",)), Job("clean", ("bpe",))], {})
    assert scheduler.startable() == []
    with pytest.raises(RuntimeError, match="stages never submitted: bpe, clean"):
        scheduler.check_all_started()


def test_a_train_stage_takes_its_turn_once_every_stage_submitted_before_it_has_workers():
    turns = WorkerTurns()
    for name in ("decoder_only", "transformer", "rnn"):
        turns.enqueue(name)
    assert turns.may_start("decoder_only")  # nothing before the first
    assert not turns.may_start("transformer") and not turns.may_start("rnn")
    turns.mark_started("decoder_only")
    assert turns.may_start("transformer") and not turns.may_start("rnn")  # the second has not started
    turns.mark_started("transformer")
    assert turns.may_start("rnn")


def test_marking_a_stage_twice_and_out_of_order_is_harmless():
    turns = WorkerTurns()
    turns.enqueue("a")
    turns.enqueue("b")
    turns.mark_started("b")  # ended before its turn (it failed before asking for workers)
    assert not turns.may_start("b")  # its own mark does not let it past "a"
    turns.mark_started("a")
    turns.mark_started("a")  # a worker group restarted by Ray Train reports again
    assert turns.may_start("b")


def test_a_stage_not_yet_enqueued_waits_and_the_submission_order_counts():
    """Admission may submit a stage later than the config lists it (a branched budget
    waits for its segment): the order is the runner's, not the config's."""
    turns = WorkerTurns()
    turns.enqueue("a")
    assert not turns.may_start("b")  # its task asked before the runner's enqueue arrived
    turns.enqueue("c")
    turns.enqueue("b")
    turns.mark_started("a")
    assert turns.may_start("c") and not turns.may_start("b")
