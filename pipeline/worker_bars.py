"""The stages' progress bars on the driver's terminal, drawn by the driver.

A stage's task, or its Ray Train worker, draws its bar with Ray's ``tqdm_ray``
(``core/context.ray_progress``): the bar's state goes to the driver as a JSON line of the
worker's output. Ray's own renderer draws each one as a tqdm bar some lines below the
cursor. At the bottom of a terminal, which is where a running command's output is, each
redraw of a bar below the first scrolled the screen by a line, and a log line written
meanwhile landed inside a bar. Here the driver draws them instead, with rich: one
display at the bottom of the terminal, a row per open bar (what it counts, a bar, the
count, its rate and ETA), every log line and worker line printed above it, and a bar
that closes replaced by one line saying what it did (``progress_lines.progress_line``).
"""

from __future__ import annotations

import threading
import time

from rich.console import Console
from rich.progress import BarColumn, Progress, ProgressColumn, Task, TextColumn
from rich.table import Column
from rich.text import Text

from pipeline.core.progress_lines import duration, progress_line


class _CountRateEta(ProgressColumn):
    """``45/200 update, 4.8 update/s, ETA 32s``."""

    def __init__(self):
        super().__init__(table_column=Column(no_wrap=True))

    def render(self, task: Task) -> Text:
        unit = task.fields.get("unit", "it")
        count = f"{task.completed:,.0f}" + (f"/{task.total:,.0f}" if task.total else "") + f" {unit}"
        speed = task.finished_speed or task.speed
        if not speed:
            return Text(count)
        shown = f"{count}, {speed:,.1f} {unit}/s"
        if task.total and task.completed < task.total:
            shown += f", ETA {duration((task.total - task.completed) / speed)}"
        return Text(shown)


class WorkerBars:
    """The open bars of this driver's workers, keyed by the id each bar's state carries."""

    def __init__(self, console: Console, here: str | None = None):
        # The console the log lines go to: printed through it, they land above the bars.
        self.console = console
        self.here = here  # this node's IP: bars from other nodes name theirs
        self.progress: Progress | None = None
        self.open: dict[str, tuple[int, float]] = {}  # bar id -> (rich task, when first seen)
        self.lock = threading.Lock()  # Ray calls in from its log thread

    def show(self, state: dict) -> None:
        """Apply one state line of a worker's bar: open, advance or close its row."""
        with self.lock:
            if self.progress is None:
                # Log lines and print() while the bars are shown go above them.
                what = TextColumn("{task.description}", table_column=Column(no_wrap=True, overflow="ellipsis"))
                self.progress = Progress(what, BarColumn(bar_width=16), _CountRateEta(),
                                         console=self.console, redirect_stdout=True, redirect_stderr=True,
                                         refresh_per_second=4)
                self.progress.start()
            desc = state.get("desc", "")
            if self.here and state.get("ip") not in (None, self.here):
                desc = f"({state['ip']}) {desc}"
            bar = state["uuid"]
            if bar not in self.open:
                task = self.progress.add_task(desc, total=state.get("total"), completed=state.get("x", 0),
                                              unit=state.get("unit", "it"))
                self.open[bar] = (task, time.monotonic())
            task, started = self.open[bar]
            self.progress.update(task, description=desc, total=state.get("total"), completed=state.get("x", 0))
            if state.get("closed"):
                self.progress.remove_task(task)
                del self.open[bar]
                self.console.print(progress_line(desc, state.get("x", 0), state.get("total"), state.get("unit", "it"),
                                                 time.monotonic() - started, closed=True),
                                   highlight=False, markup=False)

    def stop(self) -> None:
        """Take the display down (bars still open are dropped): before the run's tables."""
        with self.lock:
            if self.progress is not None:
                self.progress.stop()
                self.progress = None
            self.open.clear()
