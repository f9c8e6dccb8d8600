"""Which of Ray's worker lines the driver's console drops (pipeline/ray_output.py)."""

from __future__ import annotations

import io

import pytest

from pipeline.ray_output import is_internal_noise, plain_text


@pytest.mark.parametrize("line", [
    "[2026-11-25 09:18:48,664 I 23884 23914] core_worker.cc:512: Constructing CoreWorker",
    "[2026-11-25 09:18:48,664 D 23884 23914] raylet_client.cc:20: connected",
    "[2026-11-25 09:18:48,664 E 23884 23914] core_worker.cc:2465: Actor with class name: 'PreemptionWatcher' and "
    "ID: '99' has constructor arguments in the object store and max_restarts > 0. If the arguments ...",
    "Reporting training result 1: TrainingReport(checkpoint=Checkpoint(filesystem=local, path=/a), metrics={})",
])
def test_ray_internals_below_warning_and_known_benign_lines_are_dropped(line):
    assert is_internal_noise(line)


@pytest.mark.parametrize("line", [
    "[2026-11-25 09:18:48,664 W 23884 23914] memory_monitor.cc:200: Memory usage is high",
    "[2026-11-25 09:18:48,664 E 23884 23914] core_worker.cc:99: Unhandled error in a task",
    "train rnn_tiny (5,120 tokens/s): 121/200 update (60%), 4.0 update/s, ETA 20s",
    "Traceback (most recent call last):",
])
def test_warnings_errors_and_our_own_lines_pass(line):
    assert not is_internal_noise(line)


def test_colour_codes_are_stripped_where_the_stream_is_not_a_terminal():
    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    line = "\x1b[33m(raylet)\x1b[0m WARNING: ...\x1b[32m [repeated 2x across cluster]\x1b[0m\n"
    log_file, terminal = io.StringIO(), Terminal()
    plain_text(log_file).write(line)
    plain_text(terminal).write(line)
    assert log_file.getvalue() == "(raylet) WARNING: ... [repeated 2x across cluster]\n"
    assert terminal.getvalue() == line


def test_two_workers_progress_lines_both_print_where_ray_merges_similar_lines():
    """Ray merges lines differing only in numbers from several workers within 5 s: two
    trainings' progress lines came out as one, with "[repeated 2x across cluster]"."""
    from ray._private.ray_logging import LogDeduplicator

    from pipeline.ray_output import keep_progress_lines_apart

    def printed(deduplicator) -> list[str]:
        """Each worker's line at 0 s and again 30 s later, as two trainings print them."""
        now = [0.0]
        deduplicator.timesource = lambda: now[0]
        out = []
        for now[0] in (0.0, 0.1, 30.0, 30.1, 60.0):
            pid = 11 if now[0] % 30 == 0 else 12
            batch = {"ip": "10.0.0.1", "pid": pid, "lines": [
                f"train rnn.w{pid} (8,639 tokens/s): {int(now[0]) + pid}/3,226 update (8%), 9.{pid} update/s, ETA 5m32s"]}
            out += [line for printed in deduplicator.deduplicate(batch) for line in printed["lines"]]
        return out + [line for printed in deduplicator.flush() for line in printed["lines"]]

    merged = printed(LogDeduplicator(5, None, None))
    assert any("repeated 2x across cluster" in line for line in merged), merged  # what Ray does by itself
    import ray._private.ray_logging as ray_logging

    deduplicator = LogDeduplicator(5, "__ray_testing_never_deduplicate__", None)
    original = ray_logging.stdout_deduplicator
    ray_logging.stdout_deduplicator = deduplicator
    try:
        keep_progress_lines_apart()
    finally:
        ray_logging.stdout_deduplicator = original
    both = printed(deduplicator)
    assert [line.split(" (")[0] for line in both] == ["train rnn.w11", "train rnn.w12"] * 2 + ["train rnn.w11"], both
    assert deduplicator.allow_re.search("__ray_testing_never_deduplicate__")  # Ray's own pattern kept
