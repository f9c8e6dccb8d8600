"""A replica's backend, decoding in a process of its own.

Why not a thread of the replica: our beam search runs Python between its torch
operators, so while it decodes it holds the GIL nearly all the time. The replica's
event loop, which takes in the requests that will make up the next batch, then gets the
GIL only when it forces a switch (every 5 ms, ``sys.getswitchinterval``), a few times a
request. Measured at 32 clients, one replica with 1 CPU, a 10 ms batch wait
(benchmarks/serve_load.py, 2-core AMD EPYC): in a thread, batches of 1 to 4 sentences
and 14.8 requests/s; in this child process, 22.7. The rest of the gap to offline
throughput was not the GIL but how batches were formed (``batcher.py``).

The child is started with ``spawn``: forking a process that runs Ray's and torch's
threads can copy locks held by threads that do not exist in the child.
"""

from __future__ import annotations

import multiprocessing
import threading
import traceback
from pathlib import Path

from pipeline.serving.backends import SearchOptions, open_backend


class DecodeProcessExited(RuntimeError):
    """The child died (killed, out of memory): the replica cannot decode any more."""


class DecodeProcess:
    def __init__(self, model_dir: Path, backend: str, device: str, threads: int, quantization: str | None = None):
        """Starts the child and waits until its backend has loaded the model; raises what
        loading raised there."""
        context = multiprocessing.get_context("spawn")
        self._connection, child_end = context.Pipe()
        self._process = context.Process(target=_decode_requests, name="nmt-decode", daemon=True,
                                        args=(child_end, model_dir, backend, device, threads, quantization))
        self._process.start()
        child_end.close()  # so that the child's death reads as EOF here
        self._lock = threading.Lock()
        self.name = self._receive()  # the backend's name, once it is ready

    @property
    def pid(self) -> int:
        return self._process.pid

    def alive(self) -> bool:
        return self._process.is_alive()

    def translate(self, sources: list[list[int]], options: SearchOptions) -> list[list[tuple[str, float]]]:
        """Blocks until the child has decoded ``sources`` (waiting on the pipe releases the
        GIL, so call it from a worker thread of an event loop)."""
        with self._lock:
            try:
                self._connection.send((sources, options))
            except (BrokenPipeError, OSError):
                raise self._exited() from None
            return self._receive()

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


def _decode_requests(connection, model_dir: Path, backend: str, device: str, threads: int,
                     quantization: str | None) -> None:
    """The child: load the backend, then answer (sources, options) with ("ok", n-best
    lists) or ("error", traceback) until the replica closes the pipe."""
    try:
        engine = open_backend(model_dir, backend, device, threads, quantization)
    except Exception:
        connection.send(("error", f"loading {model_dir} for the {backend} backend:\n{traceback.format_exc()}"))
        return
    connection.send(("ready", engine.name))
    while True:
        try:
            sources, options = connection.recv()
        except EOFError:
            return  # the replica has gone
        try:
            connection.send(("ok", engine.translate(sources, options)))
        except Exception:
            connection.send(("error", traceback.format_exc()))
