"""Decoding in processes of their own: the one pool behind ``nmt translate --workers``
and each ``nmt serve`` replica.

Why processes, and not more threads in one search: between its torch operators our beam
search runs Python (the bookkeeping of ``beam.py``, the dispatch of every operator), and
that part runs on one core whatever ``torch.set_num_threads`` says. Measured on 500
Multi30k sentences, beam 4, batches of 64 (2-core AMD EPYC Zen 4): one search with 2
threads decoded 243-260 sentences/s, two processes with 1 thread each 293-318. Two
Python threads of one process, one search each, gained less (244-289): the searches
take turns at the GIL. Marian's ``--cpu-threads`` and CTranslate2's ``inter_threads``
work the same way, one batch per worker.

A service replica decodes in one such process for the same reason: while a search runs
it holds the GIL nearly all the time, and the replica's event loop, which takes in the
requests of the next batch, would get it only every 5 ms (``sys.getswitchinterval``).
Measured at 32 clients, one replica with 1 CPU, a 10 ms batch wait
(benchmarks/serving/serve_load.py, 2-core AMD EPYC): in a thread, batches of 1 to 4 sentences
and 14.8 requests/s; in a child process, 22.7.

Each process opens its engine once, at the start (its memory is paid once per process),
by calling ``open_engine``, a picklable callable (``translator.open_translator``, or the
service's CTranslate2 backend), and then answers batches of token ids with
``Translation`` lists, in order. A process that dies (killed, out of memory) fails the
batch it held and every later one with ``DecodeProcessExited``, naming its pid and exit
code; it is never a hang. A batch given a deadline (the service's) that runs past it
kills its process and raises ``DecodeDeadlineExceeded``; the pool starts a new
process in its place, and reports itself not ready until that one has loaded.
Processes are started with ``spawn``: forking a process that
runs torch's or Ray's threads can copy locks held by threads that do not exist in the
child. A spawned process imports the main module again, so a script that starts a pool
needs the ``if __name__ == "__main__":`` guard (``nmt`` and the benchmarks have it).
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import queue
import threading
import traceback
from collections.abc import Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable, Protocol


class Engine(Protocol):
    """What a pool's process decodes with: ``Translator``, or a service backend."""

    name: str

    def translate_batch(self, sources: list[list[int]], search: Any) -> list[list[Any]]:
        """The ``search.nbest`` best ``Translation``s of each encoded sentence, in order."""
        ...


class DecodeProcessExited(RuntimeError):
    """A decode process died (killed, out of memory): its pool cannot decode any more."""


class DecodeDeadlineExceeded(RuntimeError):
    """A batch ran past its deadline: its process was killed (and is being replaced)."""


class DecodeProcess:
    """One child process with one engine, fed through a pipe, one batch at a time."""

    def __init__(self, open_engine: Callable[[], Engine], threads: int, background: bool = False):
        """Starts the child (``background``: at the lowest CPU priority, ``_lower_priority``);
        ``wait_ready`` waits until its engine has loaded."""
        context = multiprocessing.get_context("spawn")
        self._connection, child_end = context.Pipe()
        self._process = context.Process(target=_decode_batches, name="nmt-decode", daemon=True,
                                        args=(child_end, open_engine, threads, background))
        self._process.start()
        child_end.close()  # so that the child's death reads as EOF here
        self._lock = threading.Lock()
        self.name = ""
        self.positions: int | None = None  # what the engine's model has (beam.model_positions)

    def wait_ready(self) -> None:
        """Blocks until the engine has loaded; raises what loading raised in the child."""
        self.name, self.positions = self._receive()

    @property
    def pid(self) -> int:
        return self._process.pid

    def alive(self) -> bool:
        return self._process.is_alive()

    def translate(self, sources: list[list[int]], search, deadline_s: float | None = None) -> list[list[Any]]:
        """Blocks until the child has decoded ``sources`` (waiting on the pipe releases the
        GIL: an event loop can call it from a worker thread). Past ``deadline_s`` seconds
        the child is killed (a search cannot be interrupted from inside) and
        ``DecodeDeadlineExceeded`` raised."""
        with self._lock:
            try:
                self._connection.send((sources, search))
            except (BrokenPipeError, OSError):
                raise self._exited() from None
            if deadline_s is not None and not self._connection.poll(deadline_s):
                self.kill()
                raise DecodeDeadlineExceeded(f"a batch of {len(sources)} sentences ran past its deadline of "
                                             f"{deadline_s:g} s; its decode process (pid {self.pid}) was stopped")
            return self._receive()

    def kill(self) -> None:
        self._process.kill()
        self._process.join()
        self._connection.close()

    def close(self) -> None:
        self._connection.close()  # the child reads EOF and returns
        self._process.join(timeout=10)
        if self._process.is_alive():
            self._process.kill()
            self._process.join()

    def _receive(self):
        try:
            status, value = self._connection.recv()
        except (EOFError, OSError):
            raise self._exited() from None
        if status == "error":
            raise RuntimeError(f"the decode process failed:\n{value}")
        return value

    def _exited(self) -> DecodeProcessExited:
        self._process.join(timeout=5)
        return DecodeProcessExited(f"the decode process (pid {self._process.pid}) exited with code "
                                   f"{self._process.exitcode}")


class DecodePool:
    def __init__(self, open_engine: Callable[[], Engine], workers: int = 1, threads_per_worker: int = 1,
                 background: bool = False):
        """``workers`` processes, each with the engine ``open_engine()`` returns there, on
        ``threads_per_worker`` torch threads; ``background``: at the lowest CPU priority
        (the service's bulk lane). Returns once every engine has loaded; raises the first
        loading error."""
        if workers < 1 or threads_per_worker < 1:
            raise ValueError(f"workers ({workers}) and threads per worker ({threads_per_worker}) must be at least 1")
        self._open_engine, self._threads, self._background = open_engine, threads_per_worker, background
        self.processes: list[DecodeProcess] = []
        try:
            self.processes = [self._start() for _ in range(workers)]
            for process in self.processes:  # they load at the same time
                process.wait_ready()
        except BaseException:
            self.close()
            raise
        self.name, self.positions = self.processes[0].name, self.processes[0].positions
        self.pids = {process.pid for process in self.processes}
        self._idle: queue.SimpleQueue[DecodeProcess] = queue.SimpleQueue()
        for process in self.processes:
            self._idle.put(process)
        self._restarting = 0  # processes being replaced, changed under _restart_lock
        self._restart_lock = threading.Lock()
        self._replaced: set[DecodeProcess] = set()  # processes being (or been) replaced: never used again
        self.restart_error = ""  # why the last replacement process failed to load, if it did

    def _start(self) -> DecodeProcess:
        with threads_of_spawned_children(self._threads):
            return DecodeProcess(self._open_engine, self._threads, self._background)

    def translate(self, sources: list[list[int]], search, deadline_s: float | None = None) -> list[list[Any]]:
        """One batch on the first idle process; blocks until it is decoded. Past
        ``deadline_s`` the process is killed, a new one started in its place (in the
        background), and ``DecodeDeadlineExceeded`` raised."""
        process = self._idle.get()
        while process in self._replaced:  # found dead (replace_exited): its replacement comes idle once loaded
            process = self._idle.get()
        try:
            return process.translate(sources, search, deadline_s)
        except (DecodeDeadlineExceeded, DecodeProcessExited):
            self._replace(process)  # the new process goes idle once loaded
            process = None
            raise
        finally:
            if process is not None:
                self._idle.put(process)

    def replace_exited(self) -> None:
        """Starts a replacement for each process that died on its own (killed, out of
        memory) while idle: without this, only the next batch given to it would find
        out, and fail."""
        for process in list(self.processes):
            if not process.alive() and process not in self._replaced:
                self._replace(process)

    def _replace(self, process: DecodeProcess) -> None:
        with self._restart_lock:
            if process in self._replaced:
                return
            self._replaced.add(process)
            self._restarting += 1

        def start_again() -> None:
            try:
                fresh = self._start()
                fresh.wait_ready()
            except Exception as error:  # noqa: BLE001 - reported by alive(), which fails the replica
                self.restart_error = f"a new decode process could not load the model: {error}"
                return
            finally:
                with self._restart_lock:
                    self._restarting -= 1
            self.processes[self.processes.index(process)] = fresh
            self.pids = {each.pid for each in self.processes}
            self._idle.put(fresh)

        threading.Thread(target=start_again, name="nmt-decode-restart", daemon=True).start()

    def map(self, batches: Iterable[list[list[int]]], search) -> Iterator[list[list[Any]]]:
        """Each batch's translations under ``search`` (a ``SearchSettings``), in batch
        order, as many batches at a time as there are processes."""
        with ThreadPoolExecutor(len(self.processes), thread_name_prefix="nmt-decode") as threads:
            yield from threads.map(lambda batch: self.translate(batch, search), batches)

    def alive(self) -> bool:
        """No process died unexpectedly, and none failed to be replaced (one killed at a
        deadline and still being replaced counts as alive)."""
        if self.restart_error:
            return False
        return self._restarting > 0 or all(process.alive() for process in self.processes)

    def ready(self) -> bool:
        """Every process is alive and loaded: none is being replaced."""
        return self._restarting == 0 and not self.restart_error and all(p.alive() for p in self.processes)

    def close(self) -> None:
        for process in self.processes:
            process.close()

    def __enter__(self) -> DecodePool:
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


def _lower_priority() -> None:
    """This process at the lowest CPU priority: Linux's SCHED_IDLE (a weight of 3 against
    a normal process's 1,024, and against 36 for one at nice 15, where Ray runs its
    workers, so that +10 on top of that reached only 19), else nice +10. Lowering one's
    own priority needs no privilege, but a sandbox may refuse the call: then the process
    runs as it is rather than not at all."""
    try:
        os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))
    except (AttributeError, OSError):  # not Linux, or refused
        try:
            os.nice(10)
        except OSError:
            pass


def _decode_batches(connection, open_engine: Callable[[], Engine], threads: int, background: bool = False) -> None:
    """The child: open the engine, then answer (sources, search) with ("ok", translations)
    or ("error", traceback) until the parent closes the pipe."""
    import torch

    if background:
        _lower_priority()
    torch.set_num_threads(threads)
    try:
        engine = open_engine()
    except Exception:
        connection.send(("error", f"loading the model ({_describe(open_engine)}):\n{traceback.format_exc()}"))
        return
    connection.send(("ready", (engine.name, getattr(engine, "positions", None))))
    while True:
        try:
            sources, search = connection.recv()
        except EOFError:
            return  # the parent has gone
        try:
            connection.send(("ok", engine.translate_batch(sources, search)))
        except Exception:
            connection.send(("error", traceback.format_exc()))


def _describe(open_engine: Callable) -> str:
    """``open_translator(model.pt, cpu, auto)`` for a partial, the callable's name otherwise."""
    function = getattr(open_engine, "func", open_engine)
    arguments = ", ".join(map(str, getattr(open_engine, "args", ())))
    return f"{getattr(function, '__name__', function)}({arguments})"
