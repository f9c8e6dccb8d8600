"""Dynamic batching for one decoder: a batch is formed when the decoder is free.

Why not Ray Serve's ``serve.batch``: its loop hands a batch to a task and goes straight
on to collecting the next one, so while a batch decodes, the requests that arrive are cut
into batches of whatever came within each ``batch_wait_s`` and queue up behind it. At a
10 ms wait and 32 concurrent clients that made batches of a few sentences, where beam
search needs tens to use its matrix products well. Here the next batch is collected only
once the decoder has returned: it takes every request that queued meanwhile (up to
``max_size``), and waits for more only when that is not a full batch.

How long that wait is: ``wait_s`` when the batch already holds as many sentences
as the last round had in flight (the last batch's plus those that queued while it
decoded), else up to ``max_wait_s`` for them. Why: concurrent clients send their next
request once their answer reaches them, tens of milliseconds after the batch is done
(HTTP, Ray Serve's proxy). A short fixed wait started the next batch without them, and
at 32 clients the clients settled into two groups that took turns: batches of 16 where
32 were there to take. Waiting for the clients of the last round lets them meet again;
when fewer come back (the load fell), one batch waits ``max_wait_s`` and the next
expects fewer.
"""

from __future__ import annotations

import asyncio
from collections import deque
from typing import Awaitable, Callable, Generic, TypeVar

Job = TypeVar("Job")
Result = TypeVar("Result")


class DynamicBatcher(Generic[Job, Result]):
    def __init__(self, decode: Callable[[list[Job]], Awaitable[list[Result]]], size_of: Callable[[Job], int],
                 max_size: int, wait_s: float, max_wait_s: float | None = None):
        """``decode`` takes a batch of jobs and returns one result per job, in order;
        ``size_of`` counts a job against ``max_size`` (sentences, not requests). A batch
        that is not full waits ``wait_s`` for more, and up to ``max_wait_s`` (default
        ``wait_s``: a fixed wait) while it holds fewer than the last round had in flight."""
        if max_wait_s is not None and max_wait_s < wait_s:
            raise ValueError(f"the longest wait ({max_wait_s} s) is shorter than the wait ({wait_s} s)")
        self._decode, self._size_of = decode, size_of
        self.max_size, self.wait_s = max_size, wait_s
        self.max_wait_s = wait_s if max_wait_s is None else max_wait_s
        self._queue: deque[tuple[Job, asyncio.Future]] = deque()
        self._last_batch_size = 0  # sentences
        self._arrived = asyncio.Event()
        self._worker: asyncio.Task | None = None
        self.dropped = 0  # jobs whose caller went (cancelled) before their batch was decoded

    async def submit(self, job: Job) -> Result:
        """The job's result, once the batch it joined is decoded; raises what decoding raised."""
        if self._size_of(job) > self.max_size:
            raise ValueError(f"a job of size {self._size_of(job)} cannot fit in a batch of {self.max_size}")
        future = asyncio.get_running_loop().create_future()
        self._queue.append((job, future))
        self._arrived.set()
        if self._worker is None or self._worker.done():  # started in the serving event loop, on first use
            self._worker = asyncio.create_task(self._decode_batches())
        return await future

    async def _decode_batches(self) -> None:
        while True:
            batch = await self._next_batch()
            waiting = [(job, future) for job, future in batch if not future.done()]  # a caller gone (cancelled)
            self.dropped += len(batch) - len(waiting)
            batch = waiting
            if not batch:
                continue
            try:
                results = await self._decode([job for job, _ in batch])
            except Exception as error:  # every caller of the batch gets it; the next batch goes on
                for _, future in batch:
                    if not future.done():
                        future.set_exception(error)
                continue
            for (_, future), result in zip(batch, results, strict=True):
                if not future.done():
                    future.set_result(result)

    async def _next_batch(self) -> list[tuple[Job, asyncio.Future]]:
        """The queued jobs in arrival order up to ``max_size``, waiting first for one
        job, then for more while the batch is not full (see the module's docstring)."""
        # In flight in the last round: the last batch's clients, likely to come back, and
        # those that queued while it decoded.
        queued = sum(self._size_of(job) for job, _ in self._queue)
        expected = min(self.max_size, self._last_batch_size + queued)
        while not self._queue:
            self._arrived.clear()
            await self._arrived.wait()
        loop = asyncio.get_running_loop()
        start = loop.time()  # the decoder came free, or its first job came to an idle one
        batch, size = [], 0
        while True:
            while self._queue and size + self._size_of(self._queue[0][0]) <= self.max_size:
                job, future = self._queue.popleft()
                batch.append((job, future))
                size += self._size_of(job)
            remaining = start + (self.wait_s if size >= expected else self.max_wait_s) - loop.time()
            if self._queue or size >= self.max_size or remaining <= 0:  # full, or the next job would not fit
                break
            self._arrived.clear()
            try:
                await asyncio.wait_for(self._arrived.wait(), remaining)
            except TimeoutError:
                break
        self._last_batch_size = size
        return batch
