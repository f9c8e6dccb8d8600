"""Beam search over several batches at once, in worker processes of one thread each.

Why processes, and not more threads in one search: between its torch operators our beam
search runs Python (the bookkeeping of ``beam.py``, the dispatch of every operator), and
that part runs on one core whatever ``torch.set_num_threads`` says. Measured on 500
Multi30k sentences, beam 4, batches of 64 (2-core AMD EPYC Zen 4): one search with 2
threads decoded 243-260 sentences/s, two worker processes with 1 thread each 293-318.
Two Python threads of one process, one search each, gained less (244-289): the searches
take turns at the GIL. Marian's ``--cpu-threads`` and CTranslate2's ``inter_threads``
work the same way, one batch per worker.

Each worker loads the model once, at the start (its memory is paid once per worker),
and receives batches of token ids; the hypotheses come back in batch order.
Workers are started with ``spawn``: forking a process that runs torch's OpenMP threads
can copy locks held by threads that do not exist in the child. A spawned worker imports
the main module again, so a script that starts workers needs the
``if __name__ == "__main__":`` guard (``nmt`` and the benchmarks have it).
"""

from __future__ import annotations

import contextlib
import itertools
import multiprocessing
import os
import threading
from collections.abc import Iterable, Iterator
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

from stages.evaluate.beam import Hypothesis


class DecodeWorkers:
    def __init__(self, model_file: Path, workers: int, threads_per_worker: int = 1, device: str = "cpu",
                 precision: str = "fp32"):
        """``workers`` processes, each to decode with the model of ``model_file`` (what
        ``Translator.from_file`` reads) on ``threads_per_worker`` torch threads."""
        from stages.evaluate.translator import ModelFiles

        if workers < 1 or threads_per_worker < 1:
            raise ValueError(f"workers ({workers}) and threads per worker ({threads_per_worker}) must be at least 1")
        ModelFiles.find(model_file)  # a missing file is named here, not as a broken pool later
        self.workers = workers
        context = multiprocessing.get_context("spawn")
        try:
            # Every worker loads the model now. The pool starts processes only as tasks
            # find none idle, and a loading task waits at the barrier for the others:
            # the ``workers`` loads therefore run in ``workers`` processes.
            ready = context.Barrier(workers)
            with threads_of_spawned_children(threads_per_worker):  # the workers start on the first submit
                self._pool = ProcessPoolExecutor(workers, mp_context=context, initializer=_set_threads,
                                                 initargs=(threads_per_worker, ready))
                loads = [self._pool.submit(_load, model_file, device, precision) for _ in range(workers)]
            _raise_first_error(loads)
            self.pids = {load.result() for load in loads}
        except BaseException:
            if hasattr(self, "_pool"):
                self._pool.shutdown(cancel_futures=True)
            raise

    def search(self, batches: Iterable[list[list[int]]], settings) -> Iterator[list[list[Hypothesis]]]:
        """Each batch's hypotheses under ``settings`` (a ``SearchSettings``), in batch
        order; ``workers`` batches decode at a time. Raises what a worker raised, and
        ``BrokenProcessPool`` if a worker died (killed, out of memory)."""
        return self._pool.map(_search, batches, itertools.repeat(settings))

    def close(self) -> None:
        self._pool.shutdown(cancel_futures=True)

    def __enter__(self) -> DecodeWorkers:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


@contextlib.contextmanager
def threads_of_spawned_children(threads: int):
    """Processes spawned inside the block size their OpenMP and MKL pools to ``threads``
    from the start: a spawned child reads them from the environment it starts with, and
    ``torch.set_num_threads`` there comes after the pool exists."""
    environment = {"OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads)}
    saved = {name: os.environ.get(name) for name in environment}
    os.environ.update(environment)
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def _raise_first_error(loads) -> None:
    """Waits for the loads; raises the error of one that failed, rather than the broken
    barrier that the other workers saw."""
    errors = [load.exception() for load in loads]
    for error in errors:
        if error is not None and not isinstance(error, threading.BrokenBarrierError):
            raise error
    for error in errors:
        if error is not None:
            raise error


# In a worker: the barrier of the loads, then the model.
_ready = None
_translator = None


def _set_threads(threads: int, ready) -> None:
    import torch

    global _ready
    torch.set_num_threads(threads)
    _ready = ready


def _load(model_file: Path, device: str, precision: str) -> int:
    from stages.evaluate.translator import Translator

    global _translator
    try:
        _translator = Translator.from_file(model_file, device, precision)
    except BaseException:
        _ready.abort()  # the other workers stop waiting
        raise
    _ready.wait(timeout=600)
    return os.getpid()


def _search(sources: list[list[int]], settings) -> list[list[Hypothesis]]:
    return _translator.search_batch(sources, settings)
