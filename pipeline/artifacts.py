"""Content-addressed, atomically committed stage artifacts.

An artifact is one directory, ``<root>/<stage>/<key>/``, whose key is a hash of
everything that determines its content: the stage's name and code version, its
config slice, and the keys of its upstream artifacts. A change to an unrelated
config section leaves the key, and so the cached artifact, untouched.

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

MANIFEST = "MANIFEST.json"
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
            self.fs, self.root = pafs.FileSystem.from_uri(root)
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

    def status(self, stage: str, key: str) -> ArtifactStatus:
        """Whether ``stage/key`` exists and every file matches its manifest (size and sha256)."""
        directory = self.path(stage, key)
        if self.fs.get_file_info(directory).type == pafs.FileType.NotFound:
            return ArtifactStatus(stage, key, ArtifactState.MISSING)
        manifest = self.read_manifest(stage, key)
        if manifest is None:
            return ArtifactStatus(stage, key, ArtifactState.INVALID, reason="no readable manifest")
        problem = self._verify_files(directory, manifest["files"])
        size = sum(entry["size"] for entry in manifest["files"].values())
        if problem:
            return ArtifactStatus(stage, key, ArtifactState.INVALID, size, problem)
        return ArtifactStatus(stage, key, ArtifactState.CACHED, size)

    def _verify_files(self, directory: str, files: dict[str, dict]) -> str:
        for name, entry in files.items():
            info = self.fs.get_file_info(f"{directory}/{name}")
            if info.type != pafs.FileType.File:
                return f"{name} is missing"
            if info.size != entry["size"]:
                return f"{name} has {info.size} bytes, manifest says {entry['size']}"
            if self._sha256(f"{directory}/{name}") != entry["sha256"]:
                return f"{name} does not match its sha256"
        return ""

    def _sha256(self, path: str) -> str:
        if self.is_local:
            return file_sha256(Path(path))
        digest = hashlib.sha256()
        with self.fs.open_input_stream(path) as stream:
            for block in iter(lambda: stream.read(1 << 20), b""):
                digest.update(block)
        return digest.hexdigest()

    def local_path(self, stage: str, key: str) -> Path:
        """A local directory holding the verified artifact (downloaded if the store is remote)."""
        if self.is_local:
            return Path(self.path(stage, key))
        target = self.local_cache / stage / key
        manifest = self.read_manifest(stage, key)
        if manifest is None:
            raise FileNotFoundError(f"artifact {stage}/{key} has no manifest in {self.root_uri}")
        if target.is_dir() and _local_files_match(target, manifest["files"]):
            return target
        staging = target.with_name(f"{key}.download-{uuid.uuid4().hex[:8]}")
        pafs.copy_files(self.path(stage, key), str(staging), source_filesystem=self.fs,
                        destination_filesystem=pafs.LocalFileSystem())
        if not _local_files_match(staging, manifest["files"]):
            shutil.rmtree(staging, ignore_errors=True)
            raise OSError(f"artifact {stage}/{key} changed while it was being downloaded")
        shutil.rmtree(target, ignore_errors=True)
        os.rename(staging, target)
        return target

    # ------------------------------------------------------------------ writing

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
        if staging.exists() and not keep_previous:
            shutil.rmtree(staging)
        staging.mkdir(parents=True, exist_ok=True)
        return staging

    def commit(self, stage: str, key: str, staging: Path, metadata: dict) -> ArtifactStatus:
        """Hash every file, write the manifest last, then make the artifact visible."""
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
        self._discard_invalid(stage, key)
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
        return ArtifactStatus(stage, key, ArtifactState.CACHED, sum(f["size"] for f in files.values()))

    def _discard_invalid(self, stage: str, key: str) -> None:
        directory = self.path(stage, key)
        if self.fs.get_file_info(directory).type == pafs.FileType.NotFound:
            return
        if self.is_local:
            # Rename first so a reader never sees a directory that is half deleted.
            trash = f"{directory}.invalid-{uuid.uuid4().hex[:8]}"
            os.rename(directory, trash)
            shutil.rmtree(trash, ignore_errors=True)
        else:
            # Manifest first: if the deletion is interrupted, what remains is untrusted.
            manifest_path = f"{directory}/{MANIFEST}"
            if self.fs.get_file_info(manifest_path).type == pafs.FileType.File:
                self.fs.delete_file(manifest_path)
            self.fs.delete_dir(directory)


def _local_files_match(directory: Path, files: dict[str, dict]) -> bool:
    for name, entry in files.items():
        path = directory / name
        if not path.is_file() or path.stat().st_size != entry["size"] or file_sha256(path) != entry["sha256"]:
            return False
    return True


def _write_json_durably(path: Path, data: dict) -> None:
    with open(path, "w", encoding="utf-8") as handle:
        json.dump(data, handle, indent=2)
        handle.flush()
        os.fsync(handle.fileno())
