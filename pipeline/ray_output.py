"""What of Ray's worker output reaches the driver's console.

Ray forwards every worker's stdout and stderr to the driver, its C++ core's own log
lines included. Dropped from the console, because they are Ray's internals and read as
noise or failures in a run's log:
- C++ core lines below WARNING;
- the known-benign error the Train controller's ``PreemptionWatcher`` actor prints at
  every start ("has constructor arguments in the object store and max_restarts > 0",
  ray-project/ray#53727: a restart could fail if the arguments were lost, which our
  runs never rely on);
- Ray Train's INFO line for every checkpoint a worker reports ("Reporting training
  result 1: TrainingReport(...)"), which reaches the console past Ray Train's own
  ``LoggingConfig(log_level="WARNING")``.
Ray's own log files (``/tmp/ray/session_latest/logs``) keep every line. On a terminal,
the state lines of the workers' progress bars go to ``worker_bars.py``, which draws them.

Ray also merges lines that differ only in their numbers, printed by several workers
within 5 s, into one "[repeated 2x across cluster]" line. Progress lines
(``progress_lines.PROGRESS_LINE``) are kept apart from that: two trainings running at
once each print their own, where the merge showed one of them and hid the other.

Ray colours each line's prefix, ``(raylet)``, ``(train pid=...)``, and its "[repeated Nx
across cluster]" notes, whatever the console is, and prints some of them (the repeated
lines it held back) outside any handler: the ``nmt`` command wraps its stdout and stderr
where they are not terminals (a log file, a batch job's output) in ``plain_text``, which
strips the codes.

Ray offers no public hook for this; the driver's printer is a handler named
``ray_print_logs`` on ``ray._private.ray_logging.global_worker_stdstream_dispatcher``,
which ``filter_worker_output`` wraps. Should a Ray release rename it, nothing is
filtered and nothing breaks.
"""

from __future__ import annotations

import json
import logging
import os
import re
import sys

from pipeline.core.progress_lines import PROGRESS_ENV, PROGRESS_LINE

log = logging.getLogger("nmt")

_COLOUR = re.compile(r"\x1b\[[0-9;]*m")

# [2026-11-25 09:18:48,664 E 23884 23914] core_worker.cc:2465: ...
_CORE_LOG_LINE = re.compile(r"\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d+ ([DIWEF]) \d+ \d+\] \S+\.(?:cc|h):\d+:")
_BENIGN = ("has constructor arguments in the object store and max_restarts > 0",
           "Reporting training result ")


def is_internal_noise(line: str) -> bool:
    """A line of Ray's C++ core below WARNING, or one of the known messages above."""
    match = _CORE_LOG_LINE.search(line)
    if match and match.group(1) in "DI":
        return True
    return any(marker in line for marker in _BENIGN)


_bars = None  # the driver's WorkerBars, while it draws the workers' bars itself


def filter_worker_output() -> None:
    """Wrap the driver's printer of worker output so it drops ``is_internal_noise`` lines
    and, on a terminal, draws the workers' progress bars itself (``worker_bars.py``)."""
    global _bars
    try:
        from ray._private.ray_logging import (
            global_worker_stdstream_dispatcher as dispatcher,
        )
    except ImportError:
        return
    keep_progress_lines_apart()
    printers = [handler for name, handler in dispatcher.handlers if name == "ray_print_logs"]
    if len(printers) != 1:
        log.debug("Ray's worker-output printer not found; its internal lines are not filtered")
        return
    printer = printers[0]
    from ray.experimental.tqdm_ray import RAY_TQDM_MAGIC  # what begins a worker bar's state line

    if _bars is None and os.environ.get(PROGRESS_ENV) == "bars" and sys.stderr.isatty():
        import ray

        from pipeline.commands.console import console
        from pipeline.worker_bars import WorkerBars

        _bars = WorkerBars(console, here=ray.util.get_node_ip_address())
    bars = _bars

    def print_filtered(data: dict) -> None:
        lines = []
        for line in data.get("lines", []):
            if bars is not None and RAY_TQDM_MAGIC in line:
                try:
                    bars.show(json.loads(line))
                except (ValueError, KeyError):  # cut off, or interleaved with another line
                    pass
            elif not is_internal_noise(line):
                lines.append(line)
        if lines:
            printer({**data, "lines": lines})

    dispatcher.remove_handler("ray_print_logs")
    dispatcher.add_handler("ray_print_logs", print_filtered)


def keep_progress_lines_apart() -> None:
    """Exempt progress lines from Ray's merging of similar lines, by the pattern Ray's
    deduplicators already take for lines never to merge (RAY_DEDUP_LOGS_ALLOW_REGEX,
    read once when ray is imported, hence set on them here)."""
    try:
        from ray._private.ray_logging import stderr_deduplicator, stdout_deduplicator
    except ImportError:
        return
    for deduplicator in (stdout_deduplicator, stderr_deduplicator):
        allowed = getattr(deduplicator, "allow_re", None)
        if allowed is None or PROGRESS_LINE.pattern not in allowed.pattern:
            pattern = PROGRESS_LINE.pattern if allowed is None else f"{allowed.pattern}|{PROGRESS_LINE.pattern}"
            deduplicator.allow_re = re.compile(pattern)


def stop_progress_bars() -> None:
    """Take down the workers' bars the driver draws, if it does: before it prints tables."""
    if _bars is not None:
        _bars.stop()


class _WithoutColour:
    """A text stream that passes on what is written to it without ANSI colour codes."""

    def __init__(self, stream):
        self._stream = stream

    def write(self, text: str) -> int:
        return self._stream.write(_COLOUR.sub("", text))

    def __getattr__(self, name):
        return getattr(self._stream, name)


def plain_text(stream):
    """``stream`` itself where it is a terminal (or wrapped already), else a wrapper that
    strips colour codes."""
    if isinstance(stream, _WithoutColour):
        return stream
    try:
        terminal = stream.isatty()
    except (AttributeError, ValueError):  # no isatty, or a closed stream
        terminal = False
    return stream if terminal else _WithoutColour(stream)
