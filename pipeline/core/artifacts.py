"""Content-addressed, atomically committed stage artifacts.

An artifact is one directory, ``<root>/<stage>/<key>/``, whose key is a hash of
everything that determines its content: the stage's name and code version, its
config slice, and the keys of its upstream artifacts. A change to an unrelated
config section leaves the key, and so the cached artifact, untouched.

Runs that share a store hold a lease on a key while they compute it
(``pipeline/core/leases.py``), and a commit never replaces a committed artifact.

Trust comes from the manifest alone. A stage writes into a staging directory;
``commit`` hashes every file, writes ``MANIFEST.json`` last, and only then makes the
directory visible under its key (a rename on a local disk; on object stores, which
cannot rename a directory, the files are uploaded first and the manifest last). A
crash or kill at any point leaves either no manifest or one that does not verify,
and such a directory is never a cache hit.

The root is a local path or any pyarrow filesystem URI (file://, s3://, gs://,
hdfs://), so the nodes of a cluster can share one store.
"""

from __future__ import annotations

import fnmatch
import hashlib
import json
import os
import shutil
import socket
import time
import uuid
from dataclasses import dataclass
from enum import Enum
from pathlib import Path

import pyarrow.fs as pafs

from pipeline.core.leases import Lease
from pipeline.core.object_store import open_filesystem, redact

MANIFEST = "MANIFEST.json"
# Written into an artifact in which ``nmt verify`` found a file that does not match its
# sha256: from then on the artifact is invalid for every run, which recomputes it.
CORRUPTED = "CORRUPTED.json"
KEY_LENGTH = 20  # hex digits: 80 bits, collision-free for any realistic number of artifacts


def artifact_key(stage: str, version: int, config_slice: dict, upstream_keys: dict[str, str]) -> str:
    payload = json.dumps(
        {"stage": stage, "version": version, "config": config_slice, "upstream": upstream_keys},
        sort_keys=True,
        separators=(",", ":"),
    )
    return hashlib.sha256(payload.encode("utf-8")).hexdigest()[:KEY_LENGTH]


class ArtifactState(str, Enum):
    CACHED = "cached"
    MISSING = "missing"
    INVALID = "invalid"


@dataclass(frozen=True)
class ArtifactStatus:
    stage: str
    key: str
    state: ArtifactState
    size_bytes: int = 0
    reason: str = ""


def file_digest(path: Path, algorithm: str = "sha256") -> str:
    with open(path, "rb") as handle:
        return hashlib.file_digest(handle, algorithm).hexdigest()


def file_sha256(path: Path) -> str:
    return file_digest(path, "sha256")


def default_cache_dir() -> Path:
    return Path(os.environ.get("NMT_CACHE_DIR", Path.home() / ".cache" / "nmt-pipeline"))


class ArtifactStore:
    """Stage artifacts under one root directory or filesystem URI."""

    def __init__(self, root: str, local_cache: Path | None = None, filesystem: pafs.FileSystem | None = None):
        """``root`` is a path or URI; ``filesystem`` (optional) is a pyarrow filesystem
        that ``root`` is a path on, for stores no URI describes (e.g. fsspec's)."""
        self.root_uri = root
        if filesystem is not None:
            self.fs, self.root = filesystem, root.rstrip("/")
        elif "://" in root:
            self.fs, self.root = open_filesystem(root)
        else:
            self.fs, self.root = pafs.LocalFileSystem(), str(Path(root).resolve())
            # Absolute, so a copy unpickled in a process with another working directory
            # (a Ray Train worker runs in its trial directory) names the same place.
            self.root_uri = self.root
        self._explicit_fs = filesystem
        # A store on this machine's disk is used in place; any other is staged and
        # read through a local cache directory.
        self.is_local = isinstance(self.fs, pafs.LocalFileSystem)
        self.local_cache = local_cache or default_cache_dir() / "artifacts"

    def check_usable(self, writable: bool) -> None:
        """Raises ``OSError`` naming the root (redacted) and the cause unless it can be
        listed, and, if ``writable``, written: so that a root that is a file, read-only
        or unreachable fails before Ray and MLflow start, not at the first commit."""
        shown = redact(self.root_uri)
        try:
            info = self.fs.get_file_info(self.root)
            if info.type == pafs.FileType.File:
                raise OSError(f"{shown} is a file, not a directory")
            if not writable:
                return
            if self.is_local and Path(self.root).resolve() == Path(Path(self.root).resolve().anchor):
                # Stages would write /download/<key>, /train/<key>, ... beside the system's own.
                raise OSError(f"{shown} is the filesystem's root: name a directory of the artifacts' own")
            made = None
            if self.is_local and info.type == pafs.FileType.NotFound:
                # Made for the probe below and removed again: permission bits do not say
                # whether a directory can be made there (root may write to /proc, which
                # refuses it), and a refused run leaves nothing behind.
                made = next(path for path in [Path(self.root), *Path(self.root).parents] if path.parent.exists())
                try:
                    os.makedirs(self.root, exist_ok=True)
                except OSError as error:
                    raise OSError(f"{shown} cannot be created: {error.strerror or type(error).__name__}") from None
            self.fs.create_dir(self.root, recursive=True)  # an object store's bucket
            probe = f"{self.root}/.nmt-write-check-{uuid.uuid4().hex[:8]}"
            try:
                with self.fs.open_output_stream(probe) as stream:
                    stream.write(b"ok")
                self.fs.delete_file(probe)
            finally:
                if made is not None:  # the directories made for it, while empty
                    _remove_empty_up_to(Path(self.root), made)
        except OSError as error:
            cause = redact(str(error).strip().splitlines()[0]) if str(error).strip() else type(error).__name__
            raise OSError(cause if cause.startswith(shown) else f"{shown}: {cause}") from None

    def __reduce__(self):
        # A filesystem built from a URI carries credentials resolved on this machine;
        # rebuilding it from the URI on each Ray worker resolves them there instead.
        return (ArtifactStore, (self.root_uri, self.local_cache, self._explicit_fs))

    def path(self, stage: str, key: str) -> str:
        return f"{self.root}/{stage}/{key}"

    # ------------------------------------------------------------------ reading

    def read_manifest(self, stage: str, key: str) -> dict | None:
        try:
            with self.fs.open_input_stream(f"{self.path(stage, key)}/{MANIFEST}") as stream:
                return json.loads(stream.read().decode("utf-8"))
        except (FileNotFoundError, OSError, json.JSONDecodeError):
            return None

    def read_files(self, stage: str, key: str, patterns: tuple[str, ...]) -> dict[str, bytes]:
        """The committed files whose names match any glob pattern, read one by one (a
        remote artifact is not downloaded whole for a few small files)."""
        manifest = self.read_manifest(stage, key) or {"files": {}}
        names = [name for name in manifest["files"] if any(fnmatch.fnmatch(name, p) for p in patterns)]
        contents = {}
        for name in names:
            with self.fs.open_input_stream(f"{self.path(stage, key)}/{name}") as stream:
                contents[name] = stream.read()
        return contents

    def status(self, stage: str, key: str, verify: bool = False) -> ArtifactStatus:
        """Whether ``stage/key`` is a trustworthy artifact, from one listing of its files.

        Every file the manifest names must be there with its size. Contents are not read:
        sha256 is computed at commit and whenever a file is downloaded; only a file
        modified after the manifest was written (the manifest is written last) is hashed
        again, and accepted if it still matches (a root copied with ``cp -r``, or by
        rsync without times, or restored from a backup: every byte the same); a local
        store's manifest then takes the newest file's time, so that it is hashed once. ``verify`` re-hashes every file as well (``nmt verify``), and marks
        an artifact whose contents no longer match (``CORRUPTED``): a file changed in
        place with its size and modification time kept passes the listing check, so
        without the mark the next run would trust it again.
        """
        directory = self.path(stage, key)
        listing = self._listing(directory)
        if not listing:
            return ArtifactStatus(stage, key, ArtifactState.MISSING)
        manifest = self.read_manifest(stage, key)
        if manifest is None or MANIFEST not in listing:
            return ArtifactStatus(stage, key, ArtifactState.INVALID, reason="no readable manifest")
        size = sum(entry["size"] for entry in manifest["files"].values())
        if CORRUPTED in listing:
            return ArtifactStatus(stage, key, ArtifactState.INVALID, size, self._corruption(directory))
        problem, touched = self._check_listing(listing, manifest["files"])
        if not problem and touched:
            problem = self._rehash_touched(directory, manifest["files"], touched, listing)
        if not problem and verify:
            problem = next((f"{name} does not match its sha256" for name, entry in manifest["files"].items()
                            if self._sha256(f"{directory}/{name}") != entry["sha256"]), "")
            if problem:
                try:
                    self._mark_corrupted(directory, problem)
                except OSError as error:  # a read-only store: the next run cannot be told
                    problem += f" (not marked for later runs: {redact(str(error).strip())})"
        if problem:
            return ArtifactStatus(stage, key, ArtifactState.INVALID, size, problem)
        return ArtifactStatus(stage, key, ArtifactState.CACHED, size)

    def _mark_corrupted(self, directory: str, problem: str) -> None:
        record = {"problem": problem, "found": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "host": socket.gethostname()}
        with self.fs.open_output_stream(f"{directory}/{CORRUPTED}") as stream:
            stream.write(json.dumps(record).encode("utf-8"))

    def _corruption(self, directory: str) -> str:
        try:
            with self.fs.open_input_stream(f"{directory}/{CORRUPTED}") as stream:
                found = json.loads(stream.read().decode("utf-8"))
            return f"nmt verify found {found['problem']} ({found['found']})"
        except (OSError, ValueError, KeyError, TypeError):
            return "nmt verify marked it corrupted"

    def _listing(self, directory: str) -> dict[str, pafs.FileInfo]:
        """Every file under ``directory`` by its relative name; empty if there is none."""
        try:
            infos = self.fs.get_file_info(pafs.FileSelector(directory, recursive=True))
        except FileNotFoundError:  # on SeaweedFS also an emptied directory that still reads as one
            return {}
        except OSError:  # on S3, also a bucket that does not exist yet
            if self.fs.get_file_info(directory).type == pafs.FileType.NotFound:
                return {}
            raise
        return {info.path[len(directory) + 1:]: info for info in infos if info.type == pafs.FileType.File}

    @staticmethod
    def _check_listing(listing: dict[str, pafs.FileInfo], files: dict[str, dict]) -> tuple[str, list[str]]:
        """What is wrong with the files as listed, and which ones were modified after the
        manifest was written (their contents decide)."""
        committed = listing[MANIFEST].mtime
        touched = []
        for name, entry in files.items():
            info = listing.get(name)
            if info is None:
                return f"{name} is missing", []
            if info.size != entry["size"]:
                return f"{name} has {info.size} bytes, manifest says {entry['size']}", []
            if committed is not None and info.mtime is not None and info.mtime > committed:
                touched.append(name)
        return "", touched

    def _rehash_touched(self, directory: str, files: dict[str, dict], touched: list[str],
                        listing: dict[str, pafs.FileInfo]) -> str:
        """The files modified after the commit, hashed: a problem naming the first that
        no longer matches, else "" (and a local manifest's time moved past them)."""
        for name in touched:
            if self._sha256(f"{directory}/{name}") != files[name]["sha256"]:
                return f"{name} was modified after the artifact was committed (its sha256 no longer matches)"
        if self.is_local:
            newest = max(listing[name].mtime for name in touched).timestamp()
            try:
                os.utime(f"{directory}/{MANIFEST}", (newest, newest))
            except OSError:  # a read-only root: hashed again next time, still accepted
                pass
        return ""

    def _sha256(self, path: str) -> str:
        if self.is_local:
            return file_sha256(Path(path))
        digest = hashlib.sha256()
        with self.fs.open_input_stream(path) as stream:
            for block in iter(lambda: stream.read(1 << 20), b""):
                digest.update(block)
        return digest.hexdigest()

    def local_path(self, stage: str, key: str, files: tuple[str, ...] | None = None) -> Path:
        """A local directory holding the committed artifact: the store's own directory
        when the store is local, else a copy in the local cache with the files that
        match the glob patterns ``files`` (all when None) and the manifest.

        Each file is hashed as it downloads and kept only if it matches the manifest,
        so a copy in the cache is trusted without reading it again, for as long as the
        store's manifest names the same sha256 for it and the copy keeps the size and
        modification time it had when it was checked (a copy written to since, by
        anything, is fetched again).
        """
        manifest = self.read_manifest(stage, key)
        if manifest is None:
            raise FileNotFoundError(f"artifact {stage}/{key} has no manifest in {redact(self.root_uri)}")
        if self.is_local:
            return Path(self.path(stage, key))
        target = self.local_cache / stage / key
        copy = _read_json(target / MANIFEST)
        cached, checked = copy.get("files", {}), copy.get("checked_mtime_ns", {})
        for name, entry in manifest["files"].items():
            if files is not None and not any(fnmatch.fnmatch(name, pattern) for pattern in files):
                continue
            local = target / name
            if (cached.get(name) == entry and local.is_file() and local.stat().st_size == entry["size"]
                    and checked.get(name) == local.stat().st_mtime_ns):
                continue
            self._download(stage, key, name, entry, local)
            checked[name] = local.stat().st_mtime_ns
        # The copy's manifest: the store's, and when each file here was last checked.
        _write_json_durably(target / MANIFEST, {**manifest, "checked_mtime_ns": {
            name: mtime for name, mtime in checked.items() if name in manifest["files"]}})
        return target

    def _download(self, stage: str, key: str, name: str, entry: dict, local: Path) -> None:
        """One file of an artifact into ``local``, hashed on the way; replaced atomically."""
        local.parent.mkdir(parents=True, exist_ok=True)
        partial = local.with_name(f"{local.name}.download-{uuid.uuid4().hex[:8]}")
        digest = hashlib.sha256()
        try:
            with self.fs.open_input_stream(f"{self.path(stage, key)}/{name}") as stream, open(partial, "wb") as out:
                for block in iter(lambda: stream.read(1 << 22), b""):
                    digest.update(block)
                    out.write(block)
            if digest.hexdigest() != entry["sha256"] or partial.stat().st_size != entry["size"]:
                raise OSError(f"artifact {stage}/{key}: {name} does not match its manifest "
                              "(changed or corrupted in the store)")
            os.replace(partial, local)
        finally:
            partial.unlink(missing_ok=True)

    # ------------------------------------------------------------------ writing

    def lease(self, stage: str, key: str) -> Lease:
        """The lease a run holds on ``stage/key`` while it computes it (``pipeline/core/leases.py``)."""
        return Lease(self.fs, f"{self.path(stage, key)}.lease", self.is_local)

    def staging_dir(self, stage: str, key: str, keep_previous: bool = False) -> Path:
        """The local directory a stage writes into; never trusted until committed.

        It is the same path for the same key on every attempt, so a resumable stage
        (training) finds the checkpoints a crashed attempt left. Other stages get it
        emptied, so nothing half-written from a killed attempt leaks into the result.
        """
        if self.is_local:
            staging = Path(self.root) / stage / f"{key}.partial"
        else:
            staging = self.local_cache / "staging" / stage / f"{key}.partial"
        if staging.is_symlink() or staging.is_file():
            # Not a directory this store made: removed itself, never followed (rmtree
            # refuses a link; nothing outside the root is touched).
            staging.unlink()
        elif staging.exists() and not keep_previous:
            shutil.rmtree(staging)
        staging.mkdir(parents=True, exist_ok=True)
        return staging

    def durable_staging(self, stage: str, key: str) -> tuple[pafs.FileSystem, str] | None:
        """Where a resumable stage keeps state that must outlive its node: on an object
        store, the ``<key>.partial`` prefix beside the artifact (never trusted: it has no
        manifest, and it is deleted at commit). None for a local store, whose staging
        directory is already on it."""
        return None if self.is_local else (self.fs, f"{self.path(stage, key)}.partial")

    def commit(self, stage: str, key: str, staging: Path, metadata: dict, replace: bool = False) -> ArtifactStatus:
        """Hash every file, write the manifest last, then make the artifact visible.

        A committed artifact is not replaced unless asked (``replace``: ``nmt run
        --force``): if another run committed the key first (runs sharing a store hold a
        lease per key, so only if one lost its lease), this one's staging is dropped and
        theirs stands; it was made from the same inputs.
        """
        existing = self.status(stage, key)
        if existing.state == ArtifactState.CACHED and not replace:
            shutil.rmtree(staging, ignore_errors=True)
            return existing
        files = {
            str(path.relative_to(staging)): {"size": path.stat().st_size, "sha256": file_sha256(path)}
            for path in sorted(staging.rglob("*"))
            if path.is_file() and path.name != MANIFEST
        }
        manifest = {
            "stage": stage,
            "key": key,
            "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            "host": socket.gethostname(),
            **metadata,
            "files": files,
        }
        self._discard_existing(stage, key)
        if self.is_local:
            _write_json_durably(staging / MANIFEST, manifest)
            final = Path(self.path(stage, key))
            try:
                os.rename(staging, final)
            except OSError:
                # Another run committed the same key first; its content is equivalent.
                shutil.rmtree(staging, ignore_errors=True)
        else:
            destination = self.path(stage, key)
            for name in files:
                # Object stores ignore this; filesystems with directories (HDFS) need it.
                self.fs.create_dir(f"{destination}/{name}".rsplit("/", 1)[0], recursive=True)
                pafs.copy_files(str(staging / name), f"{destination}/{name}",
                                source_filesystem=pafs.LocalFileSystem(), destination_filesystem=self.fs)
            with self.fs.open_output_stream(f"{destination}/{MANIFEST}") as stream:
                stream.write(json.dumps(manifest, indent=2).encode("utf-8"))
            shutil.rmtree(staging, ignore_errors=True)
            if self.fs.get_file_info(f"{destination}.partial").type != pafs.FileType.NotFound:
                self.fs.delete_dir(f"{destination}.partial")
        return ArtifactStatus(stage, key, ArtifactState.CACHED, sum(f["size"] for f in files.values()))

    def _discard_existing(self, stage: str, key: str) -> None:
        directory = self.path(stage, key)
        if self.fs.get_file_info(directory).type == pafs.FileType.NotFound:
            return
        if self.is_local:
            # Rename first so a reader never sees a directory that is half deleted.
            trash = f"{directory}.invalid-{uuid.uuid4().hex[:8]}"
            os.rename(directory, trash)
            if os.path.islink(trash):  # the link goes, not what it points to
                os.unlink(trash)
            else:
                shutil.rmtree(trash, ignore_errors=True)
        else:
            # Manifest first: if the deletion is interrupted, what remains is untrusted.
            manifest_path = f"{directory}/{MANIFEST}"
            if self.fs.get_file_info(manifest_path).type == pafs.FileType.File:
                self.fs.delete_file(manifest_path)
            try:
                self.fs.delete_dir(directory)
            except FileNotFoundError:  # SeaweedFS: an emptied directory that still reads as one
                pass


def read_local_manifest(artifact: Path) -> dict:
    """The manifest of an artifact directory already on this machine: the stage's
    version, config, upstream keys and metrics (``ArtifactStore.commit``)."""
    return json.loads((artifact / MANIFEST).read_text())


def _read_json(path: Path) -> dict:
    try:
        return json.loads(path.read_text())
    except (FileNotFoundError, json.JSONDecodeError):
        return {}


def _write_json_durably(path: Path, data: dict) -> None:
    """Write ``path`` whole or not at all: a temporary file, synced, then renamed."""
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(f"{path.name}.{uuid.uuid4().hex[:8]}.tmp")
    with open(partial, "w", encoding="utf-8") as handle:
        json.dump(data, handle, indent=2)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(partial, path)


def _remove_empty_up_to(directory: Path, top: Path) -> None:
    """Remove ``directory`` and its parents up to ``top`` (included) while they are empty:
    never what another run may have put there meanwhile."""
    while True:
        try:
            directory.rmdir()
        except OSError:  # not empty, or gone
            return
        if directory == top:
            return
        directory = directory.parent
