"""Dynamic batching for one decoder: a batch is formed when the decoder is free.

Why not Ray Serve's ``serve.batch``: its loop hands a batch to a task and goes straight
on to collecting the next one, so while a batch decodes, the requests that arrive are cut
into batches of whatever came within each ``batch_wait_s`` and queue up behind it. At a
10 ms wait and 32 concurrent clients that made batches of a few sentences, where beam
search needs tens to use its matrix products well. Here the next batch is collected only
once the decoder has returned: it takes every request that queued meanwhile (up to
``max_size``), and waits up to ``wait_s`` for more only when that is not a full batch.
"""

from __future__ import annotations

import asyncio
from collections import deque
from typing import Awaitable, Callable, Generic, TypeVar

Job = TypeVar("Job")
Result = TypeVar("Result")


class DynamicBatcher(Generic[Job, Result]):
    def __init__(self, decode: Callable[[list[Job]], Awaitable[list[Result]]], size_of: Callable[[Job], int],
                 max_size: int, wait_s: float):
        """``decode`` takes a batch of jobs and returns one result per job, in order;
        ``size_of`` counts a job against ``max_size`` (sentences, not requests)."""
        self._decode, self._size_of = decode, size_of
        self.max_size, self.wait_s = max_size, wait_s
        self._queue: deque[tuple[Job, asyncio.Future]] = deque()
        self._arrived = asyncio.Event()
        self._worker: asyncio.Task | None = None

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
            batch = [(job, future) for job, future in batch if not future.done()]  # a caller gone (cancelled)
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
        job, then up to ``wait_s`` for more while the batch is not full."""
        while not self._queue:
            self._arrived.clear()
            await self._arrived.wait()
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.wait_s
        batch, size = [], 0
        while True:
            while self._queue and size + self._size_of(self._queue[0][0]) <= self.max_size:
                job, future = self._queue.popleft()
                batch.append((job, future))
                size += self._size_of(job)
            remaining = deadline - loop.time()
            if self._queue or size >= self.max_size or remaining <= 0:  # full, or the next job would not fit
                return batch
            self._arrived.clear()
            try:
                await asyncio.wait_for(self._arrived.wait(), remaining)
            except TimeoutError:
                return batch
