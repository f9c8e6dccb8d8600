"""One writer per artifact key: the lease's exclusion, renewal, expiry and takeover, on a
local filesystem (exclusive create) and through the object-store path (claim, settle,
read back)."""

from __future__ import annotations

import json
import multiprocessing
import os
import subprocess
import sys
import threading
import time
from contextlib import contextmanager

import pyarrow.fs as pafs
import pytest

from pipeline.core import leases
from pipeline.core.leases import Lease, LeaseLost, held


@pytest.fixture(autouse=True)
def quick(monkeypatch):
    monkeypatch.setattr(leases, "POLL_SECONDS", 0.02)
    monkeypatch.setattr(leases, "SETTLE_SECONDS", 0.05)


def local_lease(tmp_path, **kwargs) -> Lease:
    return Lease(pafs.LocalFileSystem(), str(tmp_path / "train" / "k1.lease"), local=True, **kwargs)


def object_store_lease(tmp_path, **kwargs) -> Lease:
    """The object-store protocol (no exclusive create) on a local directory."""
    (tmp_path / "train").mkdir(exist_ok=True)
    return Lease(pafs.LocalFileSystem(), str(tmp_path / "train" / "k1.lease"), local=False, **kwargs)


@pytest.mark.parametrize("make", [local_lease, object_store_lease])
def test_a_held_key_is_refused_to_a_second_run_until_released(tmp_path, make):
    first, second = make(tmp_path), make(tmp_path)
    first.acquire()
    with pytest.raises(TimeoutError, match="still held by"):
        second.acquire(timeout=0.2)
    first.release()
    assert first.read() is None
    second.acquire(timeout=1)
    second.check()
    second.release()


def test_a_lease_whose_holder_stopped_renewing_is_taken_over_and_the_old_holder_cannot_commit(tmp_path):
    now = [1000.0]
    stale = local_lease(tmp_path, clock=lambda: now[0])
    stale.acquire()
    stale._stop.set()  # its renewals stop, as when its node is lost
    taker = local_lease(tmp_path, clock=lambda: now[0])
    with pytest.raises(TimeoutError):
        taker.acquire(timeout=0.1)  # not yet expired
    now[0] += leases.EXPIRE_SECONDS + 1
    taker.acquire(timeout=1)
    assert taker.read()["token"] == taker.token
    with pytest.raises(LeaseLost, match="was lost"):
        stale.check()
    taker.release()


def test_a_lease_held_by_a_process_gone_from_this_machine_is_taken_at_once(tmp_path):
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    path = tmp_path / "train" / "k1.lease"
    path.parent.mkdir()
    path.write_text(json.dumps({"holder": "a killed run", "host": os.uname().nodename, "pid": int(dead.stdout),
                                "token": "old", "renewed": time.time(), "expires_after": 3600}))
    lease = local_lease(tmp_path)
    lease.acquire(timeout=1)
    assert lease.read()["token"] == lease.token
    lease.release()


def assert_expires_by_the_file_s_age(path, lease: Lease) -> None:
    """The lease file at ``path``, read as unreadable, blocks ``lease`` while it is fresh
    and gives way once the expiry has passed since it was written."""
    with pytest.raises(TimeoutError, match="an unreadable lease file"):
        lease.acquire(timeout=0.2)  # just written: it may be a live holder's
    old = time.time() - leases.EXPIRE_SECONDS - 5
    os.utime(path, (old, old))
    lease.acquire(timeout=1)
    assert lease.read()["token"] == lease.token
    lease.release()
    assert not path.exists()


@pytest.mark.parametrize("make", [local_lease, object_store_lease])
@pytest.mark.parametrize("content", [b"", b'{"holder": "half a reco', b"\xff\xfe", b"[1, 2]"])
def test_an_unreadable_lease_file_expires_like_any_other(tmp_path, make, content):
    """An empty or garbled lease file (a holder killed while writing it) blocks the key
    only until the expiry time has passed since it was written, never for ever."""
    path = tmp_path / "train" / "k1.lease"
    path.parent.mkdir(exist_ok=True)
    path.write_bytes(content)
    assert_expires_by_the_file_s_age(path, make(tmp_path))


@pytest.mark.parametrize("make", [local_lease, object_store_lease])
@pytest.mark.parametrize("kind", ["directory", "fifo"])
def test_a_lease_path_that_is_not_a_regular_file_expires_like_an_unreadable_one(tmp_path, make, kind):
    """A directory or a FIFO where the lease file goes hung every run of the key for
    ever (a FIFO's read blocks); it is never opened, and expires by its age."""
    path = tmp_path / "train" / "k1.lease"
    path.parent.mkdir(exist_ok=True)
    if kind == "directory":
        path.mkdir()
        (path / "inside").write_text("x")
    else:
        os.mkfifo(path)
    assert_expires_by_the_file_s_age(path, make(tmp_path))


def test_a_held_lease_is_renewed_and_released_when_the_block_fails(tmp_path, monkeypatch):
    monkeypatch.setattr(leases, "RENEW_SECONDS", 0.05)
    lease = local_lease(tmp_path)
    with pytest.raises(RuntimeError, match="the stage failed"):
        with held(lease):
            first = lease.read()["renewed"]
            # Renewed by its thread, seen as it happens: how long a loaded machine takes
            # to run the thread decides nothing but how soon (the deadline only bounds a
            # lease never renewed).
            deadline = time.monotonic() + 30
            while lease.read()["renewed"] == first and time.monotonic() < deadline:
                time.sleep(0.01)
            assert lease.read()["renewed"] > first
            raise RuntimeError("the stage failed")
    assert not (tmp_path / "train" / "k1.lease").exists()


def test_waiting_runs_are_told_who_holds_the_key(tmp_path):
    holder = local_lease(tmp_path, holder="run A")
    holder.acquire()
    seen = []
    waiter = local_lease(tmp_path)
    threading.Timer(0.2, holder.release).start()
    waiter.acquire(timeout=5, on_wait=seen.append)
    assert seen and seen[0]["holder"] == "run A"
    waiter.release()


class WholeObjectWrites:
    """A local directory written the way an object store writes: each object whole or
    not at all (S3's PUT). pyarrow's local output stream truncates and then writes, so two
    claims written at once could interleave into a file neither wrote, which no object
    store produces (and which the lease rightly treats as a live, unreadable lease)."""

    def __init__(self):
        self.local = pafs.LocalFileSystem()

    def open_input_stream(self, path):
        return self.local.open_input_stream(path)

    def get_file_info(self, path):
        return self.local.get_file_info(path)

    def delete_file(self, path):
        self.local.delete_file(path)

    @contextmanager
    def open_output_stream(self, path):
        partial = f"{path}.{os.getpid()}-{threading.get_ident()}.put"
        with open(partial, "wb") as stream:
            yield stream
        os.replace(partial, path)


def _count_under_lease(root: str, local: bool, rounds: int) -> None:
    """Read, pause, write back +1: lost updates unless the lease excludes the others.
    With the code's own settle time (SETTLE_SECONDS): the read-back excludes a second
    claim only if that claim lands within it, so a shorter one would test a weaker
    protocol than runs use (and could fail on a loaded machine where runs would not)."""
    leases.POLL_SECONDS = 0.01
    counter = os.path.join(root, "counter")
    fs = pafs.LocalFileSystem() if local else WholeObjectWrites()
    for _ in range(rounds):
        with held(Lease(fs, os.path.join(root, "k1.lease"), local)):
            value = int(open(counter).read())
            time.sleep(0.01)
            with open(counter, "w") as handle:
                handle.write(str(value + 1))


@pytest.mark.parametrize("local", [True, False], ids=["exclusive create", "claim and read back"])
def test_processes_racing_for_one_key_never_hold_it_together(tmp_path, local):
    (tmp_path / "counter").write_text("0")
    processes = [multiprocessing.get_context("spawn").Process(target=_count_under_lease,
                                                              args=(str(tmp_path), local, 2))
                 for _ in range(4)]
    for process in processes:
        process.start()
    for process in processes:
        process.join(60)
    assert [process.exitcode for process in processes] == [0] * 4
    assert (tmp_path / "counter").read_text() == "8"
    assert not list(tmp_path.glob("k1.lease*"))


@pytest.mark.parametrize("make", [local_lease, object_store_lease])
@pytest.mark.parametrize("record", [
    {"holder": "x", "renewed": 1e300, "expires_after": 60},  # renewed in the far future
    {"holder": "x", "renewed": "now", "expires_after": 60},  # once a TypeError
    {"holder": "x", "renewed": None},
    {"holder": "x", "renewed": "NaN"},
    {"holder": "x", "expires_after": 1e300},  # once a wait for ever
    {"holder": "x", "renewed": 0, "expires_after": -5},
])
def test_a_lease_whose_times_are_not_a_holders_expires_by_the_file_s_age(tmp_path, make, record):
    path = tmp_path / "train" / "k1.lease"
    path.parent.mkdir(exist_ok=True)
    if "renewed" not in record:
        record = {**record, "renewed": time.time()}
    path.write_text(json.dumps(record).replace('"NaN"', "NaN"))
    assert_expires_by_the_file_s_age(path, make(tmp_path))


def test_an_unreadable_lease_file_dated_in_the_future_expires_from_when_it_was_first_seen(tmp_path):
    path = tmp_path / "train" / "k1.lease"
    path.parent.mkdir()
    path.write_bytes(b"garbage")
    future = time.time() + 10 * 365 * 24 * 3600
    os.utime(path, (future, future))
    later = [0.0]
    lease = local_lease(tmp_path, clock=lambda: time.time() + later[0])
    with pytest.raises(TimeoutError, match="an unreadable lease file"):
        lease.acquire(timeout=0.2)
    later[0] = leases.EXPIRE_SECONDS + 5  # the reader's clock: a minute on, not ten years
    lease.acquire(timeout=1)
    assert lease.read()["token"] == lease.token
    lease.release()
