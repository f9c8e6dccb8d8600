"""One writer per artifact key: a lease that a run holds while it computes a stage.

Two runs of the same config against one store (two users sharing a cluster's S3 cache,
a run started twice) plan the same keys. Without coordination both would compute each
stage, train into the same staging directory, and race to commit. With a lease, the
first run to claim ``<stage>/<key>`` computes it; the other waits, then finds the
committed artifact and uses it, as a cache hit. Nothing is computed twice, and no
stage's work is lost or trusted half-written.

A lease is a small JSON file, ``<root>/<stage>/<key>.lease``, naming its holder and
renewed by a background thread every ``RENEW_SECONDS``. A holder that dies (a killed
driver, a lost node) stops renewing; once ``EXPIRE_SECONDS`` pass without a renewal,
or at once when the holder's process is gone from this same machine, a waiting run
takes the lease over, and a resumable stage resumes from the staging the dead holder
left.

Claiming is exclusive by construction on a local or shared POSIX filesystem (an
``O_EXCL`` create, and a rename to break an expired lease). Object stores offer no
exclusive create through pyarrow; there a claim is written, left to settle, and read
back: of several runs claiming in the same instant, only the last writer reads its
own claim. Commits stay safe even if two runs ever held one key: ``ArtifactStore.commit``
never replaces a committed artifact (first commit wins).
"""

from __future__ import annotations

import json
import logging
import math
import os
import socket
import shutil
import threading
import time
import uuid
from contextlib import contextmanager
from typing import Callable, Iterator

import pyarrow.fs as pafs

log = logging.getLogger("nmt")

RENEW_SECONDS = 10.0
EXPIRE_SECONDS = 60.0  # six renewals missed: the holder is gone, not slow
SETTLE_SECONDS = 1.0  # an object store's claim is read back after this
POLL_SECONDS = 2.0
# What a record's times may be and still be read as a holder's: renewed no later than
# the reader's clock plus this (machines' clocks differ a little), an expiry of at most
# an hour. Anything else (a hand-made file, 1e300, "x", null) is read as unreadable.
CLOCK_SKEW_SECONDS = 60.0
MAX_EXPIRE_SECONDS = 3600.0


class LeaseLost(RuntimeError):
    """The lease expired or was taken over while this run held it: its work must not be committed."""


class Lease:
    """The lease on one key. ``holder`` says who holds it, for the waiting runs' logs."""

    def __init__(self, fs: pafs.FileSystem, path: str, local: bool, holder: str | None = None,
                 clock: Callable[[], float] = time.time):
        self.fs, self.path, self.local, self.clock = fs, path, local, clock
        self.token = uuid.uuid4().hex
        self.holder = holder or f"{socket.gethostname()}:{os.getpid()}"
        self._stop = threading.Event()
        self._lost = threading.Event()
        self._renewer: threading.Thread | None = None
        self._first_seen: dict[tuple, float] = {}  # an unreadable file's (mtime, size): when this run first saw it

    # ------------------------------------------------------------------ holding

    def acquire(self, timeout: float | None = None, on_wait: Callable[[dict], None] | None = None) -> None:
        """Claim the key, waiting while another run's live lease holds it; ``on_wait``
        sees that lease's record at each wait. Starts the renewing thread."""
        waited_since = time.monotonic()
        while not self._try_claim():
            if timeout is not None and time.monotonic() - waited_since > timeout:
                raise TimeoutError(f"{self.path} is still held by {self.read() or 'another run'}")
            if on_wait is not None:
                on_wait(self.read() or {})
            time.sleep(POLL_SECONDS)
        self._renewer = threading.Thread(target=self._renew_until_released, daemon=True,
                                         name=f"lease {self.path.rsplit('/', 1)[-1]}")
        self._renewer.start()

    def check(self) -> None:
        """Raise ``LeaseLost`` unless this run still holds the key: called before a commit."""
        record = self.read()
        if self._lost.is_set() or record is None or record.get("token") != self.token:
            raise LeaseLost(f"the lease {self.path} was lost while this run held it "
                            f"(now {record.get('holder') if record else 'nobody'}): not committing")

    def release(self) -> None:
        self._stop.set()
        if self._renewer is not None:
            self._renewer.join()
        record = self.read()
        if record is not None and record.get("token") == self.token:
            try:
                self.fs.delete_file(self.path)
            except FileNotFoundError:
                pass

    # ------------------------------------------------------------------ the record

    def read(self) -> dict | None:
        """The lease's record; None when there is no lease. A lease file that cannot be
        read (empty, truncated, not JSON: a holder killed while writing it, a stray file)
        or whose times are not a holder's (not finite numbers, renewed in the future,
        an expiry out of range) reads as a record renewed when the file was written, so
        that it expires like any other instead of blocking the key for ever. So does a
        path that is not a regular file (a directory, a FIFO, which would block the
        read itself): never opened."""
        info = self.fs.get_file_info(self.path)
        if info.type == pafs.FileType.NotFound:
            return None
        if info.type != pafs.FileType.File:
            return self._unreadable_record()
        try:
            with self.fs.open_input_stream(self.path) as stream:
                data = stream.read()
        except (FileNotFoundError, OSError):
            return None
        try:
            record = json.loads(data.decode("utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError):
            record = None
        if isinstance(record, dict) and self._times_are_a_holders(record):
            return record
        return self._unreadable_record()

    def _times_are_a_holders(self, record: dict) -> bool:
        renewed, expires = record.get("renewed"), record.get("expires_after", EXPIRE_SECONDS)
        if not all(isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
                   for value in (renewed, expires)):
            return False
        return 0 < expires <= MAX_EXPIRE_SECONDS and renewed <= self.clock() + CLOCK_SKEW_SECONDS

    def _unreadable_record(self) -> dict | None:
        """When the file was written is its modification time, or, where that lies in the
        future (a clock set wrong, a touched file), when this run first saw it: its age
        is counted on the reader's clock, never from the future."""
        info = self.fs.get_file_info(self.path)
        if info.type == pafs.FileType.NotFound:
            return None
        written = info.mtime.timestamp() if info.mtime is not None else 0.0
        if written > self.clock() + CLOCK_SKEW_SECONDS:
            written = self._first_seen.setdefault((written, info.size), self.clock())
        return {"holder": f"an unreadable lease file ({self.path}; it expires {EXPIRE_SECONDS:.0f} s after it "
                          "was written)", "renewed": written, "expires_after": EXPIRE_SECONDS}

    def _record(self) -> bytes:
        return json.dumps({"holder": self.holder, "host": socket.gethostname(), "pid": os.getpid(),
                           "token": self.token, "renewed": self.clock(),
                           "expires_after": EXPIRE_SECONDS}).encode("utf-8")

    def _expired(self, record: dict) -> bool:
        if record.get("host") == socket.gethostname() and not _process_alive(record.get("pid")):
            return True  # its holder ran on this machine and is gone: no need to wait for the clock
        return self.clock() - record.get("renewed", 0.0) > record.get("expires_after", EXPIRE_SECONDS)

    def _try_claim(self) -> bool:
        record = self.read()
        if record is not None and not self._expired(record):
            return False
        if self.local:
            return self._claim_exclusively(record)
        return self._claim_by_reading_back(record)

    def _claim_exclusively(self, expired: dict | None) -> bool:
        if expired is not None:
            # Break it by renaming it away: of several runs breaking it, one rename succeeds.
            broken = f"{self.path}.expired-{self.token[:8]}"
            try:
                os.rename(self.path, broken)
            except FileNotFoundError:
                return False
            moved = _read_local(broken)
            if moved.get("token") != expired.get("token"):
                # Another run broke it first and claimed it since: give its claim back.
                try:
                    os.link(broken, self.path)
                except FileExistsError:
                    pass  # a third claimed meanwhile; the one moved away sees its lease lost
                os.unlink(broken)
                return False
            _remove_local(broken)
        os.makedirs(os.path.dirname(self.path), exist_ok=True)
        try:
            descriptor = os.open(self.path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        except FileExistsError:
            return False
        try:
            with os.fdopen(descriptor, "wb") as handle:
                handle.write(self._record())
        except OSError:  # a full disk: no half-written lease left to block every later run
            os.unlink(self.path)
            raise
        return True

    def _claim_by_reading_back(self, expired: dict | None) -> bool:
        found = self.fs.get_file_info(self.path).type
        if expired is not None and found not in (pafs.FileType.File, pafs.FileType.NotFound):
            # An expired "lease" that is a directory or a FIFO (writing to it would block): removed.
            self.fs.delete_dir(self.path) if found == pafs.FileType.Directory else self.fs.delete_file(self.path)
        self._write()
        time.sleep(SETTLE_SECONDS)
        record = self.read()
        return record is not None and record.get("token") == self.token

    def _write(self) -> None:
        if self.local:
            # Whole or not at all: a reader never sees half a record.
            partial = f"{self.path}.{self.token[:8]}.tmp"
            try:
                with open(partial, "wb") as handle:
                    handle.write(self._record())
                os.replace(partial, self.path)
            finally:
                if os.path.exists(partial):  # the write failed (a full disk)
                    os.unlink(partial)
        else:
            with self.fs.open_output_stream(self.path) as stream:
                stream.write(self._record())

    def _renew_until_released(self) -> None:
        while not self._stop.wait(RENEW_SECONDS):
            record = self.read()
            if record is None or record.get("token") != self.token:
                self._lost.set()
                log.warning("lease %s taken over by %s", self.path, record.get("holder") if record else "nobody")
                return
            try:
                self._write()
            except OSError as error:  # a store down for a moment: the next renewal may work
                log.warning("lease %s not renewed: %s", self.path, error)


@contextmanager
def held(lease: Lease, on_wait: Callable[[dict], None] | None = None) -> Iterator[Lease]:
    """Hold ``lease`` for the block; released however the block ends."""
    lease.acquire(on_wait=on_wait)
    try:
        yield lease
    finally:
        lease.release()


def _read_local(path: str) -> dict:
    if not os.path.isfile(path):  # a directory or a FIFO moved away: no record, and never opened
        return {}
    try:
        with open(path, "rb") as handle:
            record = json.loads(handle.read().decode("utf-8"))
    except (FileNotFoundError, UnicodeDecodeError, json.JSONDecodeError):
        return {}
    return record if isinstance(record, dict) else {}


def _remove_local(path: str) -> None:
    if os.path.isdir(path) and not os.path.islink(path):
        shutil.rmtree(path)
    else:
        os.unlink(path)


def _process_alive(pid) -> bool:
    if not isinstance(pid, int) or pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # alive, another user's
        return True
    return True
