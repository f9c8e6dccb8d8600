"""An asyncio event loop on a virtual clock, for tests of code that waits on timers
(``asyncio.sleep``, ``wait_for``, ``loop.time()``): the clock stands still while any
task can run and jumps to the next timer when every task waits. A scenario written in
tens of milliseconds runs in microseconds, its timers fire in the order and at the
times written, whatever the machine's load, and a test's verdict never rests on how
long real sleeps took."""

from __future__ import annotations

import asyncio
import selectors
from collections.abc import Coroutine
from typing import Any


class _JumpingSelector(selectors.DefaultSelector):
    """Polls without blocking; where the loop would block until its next timer, moves
    the loop's clock there instead."""

    def __init__(self) -> None:
        super().__init__()
        self.loop: VirtualClockLoop | None = None

    def select(self, timeout: float | None = None):
        ready = super().select(0)
        if ready or timeout == 0:
            return ready
        if timeout is None:  # no timer and nothing to run: a real loop would wait for ever
            raise RuntimeError("every task waits and no timer is set: the scenario cannot go on")
        self.loop.advance(timeout)
        return ready


class VirtualClockLoop(asyncio.SelectorEventLoop):
    def __init__(self) -> None:
        selector = _JumpingSelector()
        super().__init__(selector)
        selector.loop = self
        self._now = 0.0

    def time(self) -> float:
        return self._now

    def advance(self, seconds: float) -> None:
        self._now += seconds


def run(scenario: Coroutine[Any, Any, Any]) -> Any:
    """``asyncio.run`` on a virtual clock that starts at 0."""
    with asyncio.Runner(loop_factory=VirtualClockLoop) as runner:
        return runner.run(scenario)
