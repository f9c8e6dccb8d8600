"""Progress where no terminal draws bars: a line per bar every few seconds.

A bar redrawn into a file or a CI log is a new line at every redraw, and under Ray each
worker's bar is redrawn on the driver: the default job wrote 6,754 lines, nearly all of
them redraws. So when the driver's output is not a terminal, ``nmt run`` sets
``NMT_PROGRESS=lines`` for itself and every Ray worker (``runner.connect_ray``), and the
bars of the stages and of training become ``LineProgress``: one line every
``NMT_PROGRESS_SECONDS`` seconds (default 30) while a bar advances, and one when it
closes. The rate is over the whole time since the bar started, not since the last
redraw, so a burst of quick updates does not read as millions of pairs a second.
``NMT_PROGRESS=bars`` keeps the bars in a file too.
"""

from __future__ import annotations

import os
import re
import sys
import time

PROGRESS_ENV = "NMT_PROGRESS"  # "lines" or "bars"
INTERVAL_ENV = "NMT_PROGRESS_SECONDS"


def lines_wanted() -> bool:
    return os.environ.get(PROGRESS_ENV) == "lines"


def choose_progress_style() -> str:
    """What this driver asks for: the user's ``NMT_PROGRESS``, else bars on a terminal
    and lines anywhere else; set in the environment, for the processes it starts."""
    style = os.environ.get(PROGRESS_ENV) or ("bars" if sys.stderr.isatty() else "lines")
    os.environ[PROGRESS_ENV] = style
    return style


class LineProgress:
    """The part of tqdm's interface the pipeline uses (``update``, ``set_description``,
    ``total``, ``close``), as lines."""

    def __init__(self, total: float | None = None, desc: str = "", unit: str = "it", **_tqdm_options):
        self.total, self.desc, self.unit, self.n = total, desc, unit, 0
        self.interval = float(os.environ.get(INTERVAL_ENV, "30"))
        self.started = self.printed = time.monotonic()
        self.closed = False

    def update(self, n: float = 1) -> None:
        self.n += n
        if time.monotonic() - self.printed >= self.interval:
            self._print()

    def set_description(self, desc: str) -> None:
        self.desc = desc

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            self._print()

    def _print(self) -> None:
        now = time.monotonic()
        self.printed, elapsed = now, now - self.started
        # Written to the stream, not print(): where Ray Train's print patch is on (``nmt
        # run`` turns it off: runner.connect_ray), print in its workers is a logger call
        # that also tees to the stream, and each line would come out twice.
        sys.stderr.write(self.line(elapsed) + "\n")
        sys.stderr.flush()

    def line(self, elapsed: float) -> str:
        return progress_line(self.desc, self.n, self.total, self.unit, elapsed, self.closed)


def progress_line(desc: str, n: float, total: float | None, unit: str, elapsed: float, closed: bool) -> str:
    """``clean train: 1,200/3,000 pairs (40%), 850 pairs/s, ETA 2s``; once closed, the time taken."""
    done = f"{n:,.0f}" + (f"/{total:,.0f}" if total else "") + f" {unit}"
    if total:
        done += f" ({100 * n / total:.0f}%)"
    rate = n / elapsed if elapsed > 0 else 0.0
    parts = [f"{desc}: {done}"]
    if not (closed and elapsed < 1.0):  # a bar done within a second reads as millions a second
        parts.append(f"{rate:,.1f} {unit}/s")
    if closed:
        parts.append(f"done in {duration(elapsed)}")
    elif total and rate > 0:
        parts.append(f"ETA {duration((total - n) / rate)}")
    return ", ".join(parts)


# What ``progress_line`` writes, for whatever must tell such a line apart (ray_output.py).
PROGRESS_LINE = re.compile(r"^.+: [\d,]+(?:/[\d,]+)? \S+(?: \(\d+%\))?"
                           r"(?:, [\d,.]+ \S+/s(?:, (?:ETA|done in) \d+(?:m\d\d)?s)?|, done in \d+(?:m\d\d)?s)$")


def duration(seconds: float) -> str:
    """``45s``, ``2m05s``."""
    seconds = max(0, round(seconds))
    return f"{seconds // 60}m{seconds % 60:02d}s" if seconds >= 60 else f"{seconds}s"
