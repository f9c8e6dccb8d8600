"""HTTP(S) downloads that resume, retry and verify.

Bytes go to ``<dest>.part``; an interrupted download (a dropped connection, a
killed run) continues from there with a Range request. The file gets its final
name only after its sha256 matches the pinned digest, so a later run never trusts
a truncated or corrupted download.

A per-read timeout alone never ends a server that trickles a byte now and then, so
each attempt also has a deadline and a floor on its rate: an attempt that runs past
``ATTEMPT_DEADLINE_S``, or receives less than ``STALL_BYTES`` in ``STALL_WINDOW_S``,
is cut off and counts as a failed attempt (the next one resumes from the ``.part``).
"""

from __future__ import annotations

import os
import sys
import threading
import time
from pathlib import Path
from typing import Any, Callable

import requests

from pipeline.core.artifacts import file_sha256
from pipeline.core.object_store import redact
from stages.shared.errors import InputDataError

CHUNK_BYTES = 1 << 20
# Exponential backoff between attempts: 1, 2, 4, 8 s rides out a flaky mirror or proxy.
RETRY_BACKOFF_S = 1.0
ATTEMPT_DEADLINE_S = 1800.0  # an attempt's wall time; the next attempt resumes
STALL_WINDOW_S, STALL_BYTES = 60.0, 16 * 1024  # less than 16 KiB a minute: stalled


class DownloadError(InputDataError):
    pass


def fetch_url(
    url: str,
    dest: Path,
    sha256: str,
    progress: Callable[..., Any],
    retries: int = 4,
    timeout_s: float = 30.0,
    backoff_s: float | None = None,
) -> Path:
    """Download ``url`` to ``dest`` and verify it; resume a ``.part`` file if one is there."""
    partial = dest.with_name(dest.name + ".part")
    dest.parent.mkdir(parents=True, exist_ok=True)
    last_error: Exception | None = None
    for attempt in range(retries + 1):
        if attempt:
            wait = (RETRY_BACKOFF_S if backoff_s is None else backoff_s) * 2 ** (attempt - 1)
            # Said as it happens: five attempts against a server that is down take minutes.
            sys.stderr.write(f"download {redact(url)}: attempt {attempt} of {retries + 1} failed ({last_error}); "
                             f"trying again in {wait:g} s\n")
            sys.stderr.flush()
            time.sleep(wait)
        try:
            _download_to(url, partial, progress, timeout_s)
            break
        except (requests.ConnectionError, requests.Timeout, requests.exceptions.ChunkedEncodingError) as error:
            last_error = error
        except requests.HTTPError as error:
            status = error.response.status_code
            if status < 500 and status != 429:
                raise DownloadError(f"{url}: HTTP {status}; check the URL in the config") from None
            last_error = error
    else:
        raise DownloadError(f"{url}: unreachable after {retries + 1} attempts ({last_error})")
    actual = file_sha256(partial)
    if actual != sha256:
        partial.unlink()
        raise DownloadError(
            f"{url}: checksum mismatch: expected sha256 {sha256}, got {actual}. "
            "The file was deleted; if the source changed on purpose, update 'sha256' in the config."
        )
    os.replace(partial, dest)
    return dest


def _download_to(url: str, partial: Path, progress: Callable[..., Any], timeout_s: float) -> None:
    have = partial.stat().st_size if partial.exists() else 0
    # Identity encoding: Range offsets and the pinned sha256 are about the file's bytes.
    headers = {"Accept-Encoding": "identity", **({"Range": f"bytes={have}-"} if have else {})}
    with requests.get(url, headers=headers, stream=True, timeout=timeout_s) as response:
        if response.status_code == 416:  # range past the end: the .part file is already complete
            return
        response.raise_for_status()
        if have and response.status_code != 206:
            have = 0  # the server ignored the Range header: start over
        length = response.headers.get("Content-Length")
        total = have + int(length) if length is not None else None
        bar = progress(total=total, desc=url.rsplit("/", 1)[-1], unit="B")
        bar.update(have)
        # Left on, urllib3 discards a chunk cut short by a dropped connection; off, the
        # bytes that did arrive are kept and the length check below resumes after them.
        response.raw.enforce_content_length = False
        watch = _AttemptWatch(response)
        try:
            with open(partial, "ab" if have else "wb") as handle:
                # read1: what has arrived, up to a chunk, so a trickle still reaches the file.
                while chunk := response.raw.read1(CHUNK_BYTES):
                    handle.write(chunk)
                    watch.received += len(chunk)
                    bar.update(len(chunk))
        except Exception:
            if watch.why:  # the watch closed the connection: say why, not what the read met
                raise requests.Timeout(watch.why) from None
            raise
        finally:
            watch.stop()
        if watch.why:
            raise requests.Timeout(watch.why)
        bar.close()
        if total is not None and partial.stat().st_size < total:
            raise requests.exceptions.ChunkedEncodingError(
                f"connection closed at {partial.stat().st_size} of {total} bytes")


class _AttemptWatch:
    """Closes ``response`` once its attempt has run past ``ATTEMPT_DEADLINE_S`` or
    stalled (under ``STALL_BYTES`` in ``STALL_WINDOW_S``); ``why`` then says which.
    Closing the connection is what ends a read blocked on a trickling server."""

    def __init__(self, response):
        self.received, self.why = 0, ""
        self._response, self._stop = response, threading.Event()
        threading.Thread(target=self._watch, name="download-watch", daemon=True).start()

    def _watch(self) -> None:
        started = window_start = time.monotonic()
        at_window_start = 0
        while not self._stop.wait(min(1.0, STALL_WINDOW_S / 4)):
            now = time.monotonic()
            if now - started > ATTEMPT_DEADLINE_S:
                self.why = f"the attempt ran past its deadline of {ATTEMPT_DEADLINE_S:g} s"
            elif now - window_start >= STALL_WINDOW_S:
                if self.received - at_window_start < STALL_BYTES:
                    self.why = (f"stalled: {self.received - at_window_start} bytes in the last "
                                f"{STALL_WINDOW_S:g} s (at least {STALL_BYTES} expected)")
                window_start, at_window_start = now, self.received
            if self.why:
                self._response.close()
                return

    def stop(self) -> None:
        self._stop.set()
