"""The artifact store: keys, atomic commit, verification."""

from __future__ import annotations

import json
import os
import pickle
import shutil
import time
from pathlib import Path

import pyarrow.fs as pafs
import pytest

from pipeline.core.artifacts import MANIFEST, ArtifactState, ArtifactStore, artifact_key


def _stage_output(directory, text="hello"):
    (directory / "data.txt").write_text(text)
    (directory / "nested").mkdir(exist_ok=True)
    (directory / "nested" / "more.bin").write_bytes(b"\x00\x01" * 100)


def test_key_depends_on_stage_version_slice_and_upstream():
    base = artifact_key("bpe", 1, {"vocab_size": 8000}, {"clean": "abc"})
    assert base == artifact_key("bpe", 1, {"vocab_size": 8000}, {"clean": "abc"})
    assert base != artifact_key("bpe", 2, {"vocab_size": 8000}, {"clean": "abc"})
    assert base != artifact_key("bpe", 1, {"vocab_size": 8001}, {"clean": "abc"})
    assert base != artifact_key("bpe", 1, {"vocab_size": 8000}, {"clean": "abd"})
    assert base != artifact_key("tokenize", 1, {"vocab_size": 8000}, {"clean": "abc"})


def test_staged_output_is_not_visible_until_committed(tmp_path):
    store = ArtifactStore(str(tmp_path / "store"))
    staging = store.staging_dir("clean", "k1")
    _stage_output(staging)
    assert store.status("clean", "k1").state == ArtifactState.MISSING
    status = store.commit("clean", "k1", staging, {"metrics": {"pairs": 3}})
    assert status.state == ArtifactState.CACHED
    assert store.status("clean", "k1").state == ArtifactState.CACHED
    assert not staging.exists()
    manifest = json.loads((tmp_path / "store" / "clean" / "k1" / MANIFEST).read_text())
    assert set(manifest["files"]) == {"data.txt", "nested/more.bin"}
    assert manifest["metrics"] == {"pairs": 3}


def _committed(tmp_path) -> ArtifactStore:
    store = ArtifactStore(str(tmp_path))
    staging = store.staging_dir("clean", "k1")
    _stage_output(staging)
    store.commit("clean", "k1", staging, {})
    return store


def test_status_reads_no_file_contents(tmp_path, monkeypatch):
    store = _committed(tmp_path)

    def no_hashing(path):
        raise AssertionError(f"status hashed {path}")

    monkeypatch.setattr("pipeline.core.artifacts.file_sha256", no_hashing)
    assert store.status("clean", "k1").state == ArtifactState.CACHED


def test_a_truncated_or_missing_file_is_invalid(tmp_path):
    store = _committed(tmp_path)
    (tmp_path / "clean" / "k1" / "nested" / "more.bin").write_bytes(b"\x00")
    status = store.status("clean", "k1")
    assert status.state == ArtifactState.INVALID and "nested/more.bin has 1 bytes" in status.reason
    (tmp_path / "clean" / "k1" / "nested" / "more.bin").unlink()
    assert store.status("clean", "k1").reason == "nested/more.bin is missing"


def test_a_file_rewritten_after_commit_is_invalid_even_at_the_same_size(tmp_path):
    store = _committed(tmp_path)
    time.sleep(0.01)
    (tmp_path / "clean" / "k1" / "data.txt").write_text("HELLO")  # same size, newer mtime
    status = store.status("clean", "k1")
    assert status.state == ArtifactState.INVALID and "modified after" in status.reason


def test_a_root_copied_without_its_times_is_all_cached_and_one_changed_byte_is_not(tmp_path):
    """``cp -r`` (or rsync without times, a restore from backup) gives every file a new
    modification time, some after the manifest's: the contents decide, hashed once."""
    import subprocess

    _committed(tmp_path / "root")
    time.sleep(0.01)
    subprocess.run(["cp", "-r", str(tmp_path / "root"), str(tmp_path / "copy")], check=True)
    copy = ArtifactStore(str(tmp_path / "copy"))
    manifest = tmp_path / "copy" / "clean" / "k1" / MANIFEST
    os.utime(manifest, (1, 1))  # as if copied first: every file newer than it
    assert copy.status("clean", "k1").state == ArtifactState.CACHED
    assert manifest.stat().st_mtime > 1  # moved past the files: the next status hashes nothing

    changed = tmp_path / "copy" / "clean" / "k1" / "data.txt"
    changed.write_text("HELLO")  # one byte's change at the same size, after the commit
    status = copy.status("clean", "k1")
    assert status.state == ArtifactState.INVALID
    assert status.reason == "data.txt was modified after the artifact was committed (its sha256 no longer matches)"


def test_a_same_size_change_that_keeps_its_mtime_is_caught_by_verify(tmp_path):
    store = _committed(tmp_path)
    path = tmp_path / "clean" / "k1" / "data.txt"
    before = path.stat()
    path.write_text("HELLO")
    os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))
    assert store.status("clean", "k1").state == ArtifactState.CACHED  # the listing cannot tell
    status = store.status("clean", "k1", verify=True)
    assert status.state == ArtifactState.INVALID and status.reason == "data.txt does not match its sha256"
    # What verify found holds for every later run: the artifact is invalid, and a commit replaces it.
    later = store.status("clean", "k1")
    assert later.state == ArtifactState.INVALID and "nmt verify found data.txt does not match" in later.reason
    staging = store.staging_dir("clean", "k1")
    _stage_output(staging)
    assert store.commit("clean", "k1", staging, {}).state == ArtifactState.CACHED
    assert store.status("clean", "k1", verify=True).state == ArtifactState.CACHED
    assert path.read_text() == "hello"


def test_directory_without_manifest_is_invalid_and_replaced_on_commit(tmp_path):
    store = ArtifactStore(str(tmp_path))
    (tmp_path / "clean" / "k1").mkdir(parents=True)
    (tmp_path / "clean" / "k1" / "data.txt").write_text("half written")
    assert store.status("clean", "k1").state == ArtifactState.INVALID
    staging = store.staging_dir("clean", "k1")
    _stage_output(staging)
    store.commit("clean", "k1", staging, {})
    assert store.status("clean", "k1").state == ArtifactState.CACHED
    assert (tmp_path / "clean" / "k1" / "data.txt").read_text() == "hello"


def test_staging_left_by_a_killed_attempt_is_emptied_unless_resumable(tmp_path):
    store = ArtifactStore(str(tmp_path))
    (store.staging_dir("train", "k1") / "checkpoint").write_text("step 100")
    assert (store.staging_dir("train", "k1", keep_previous=True) / "checkpoint").exists()
    assert not (store.staging_dir("train", "k1") / "checkpoint").exists()


def test_non_local_filesystem_uploads_manifest_last_and_reads_through_cache(tmp_path):
    remote_dir = tmp_path / "remote"
    remote_dir.mkdir()
    # A real pyarrow filesystem that is not LocalFileSystem takes the object-store path.
    filesystem = pafs.SubTreeFileSystem(str(remote_dir), pafs.LocalFileSystem())
    store = ArtifactStore("store", local_cache=tmp_path / "cache", filesystem=filesystem)
    assert not store.is_local
    staging = store.staging_dir("bpe", "k9")
    assert tmp_path / "cache" in staging.parents
    _stage_output(staging, "remote content")
    store.commit("bpe", "k9", staging, {})
    assert (remote_dir / "store" / "bpe" / "k9" / MANIFEST).is_file()
    assert store.status("bpe", "k9").state == ArtifactState.CACHED
    local = store.local_path("bpe", "k9")
    assert local == tmp_path / "cache" / "bpe" / "k9"
    assert (local / "data.txt").read_text() == "remote content"
    # The store crosses process boundaries (Ray tasks) intact.
    assert pickle.loads(pickle.dumps(store)).status("bpe", "k9").state == ArtifactState.CACHED
    # Only the files asked for are fetched (with the manifest), hashed as they arrive.
    partial = ArtifactStore("store", local_cache=tmp_path / "cache2", filesystem=filesystem)
    local = partial.local_path("bpe", "k9", ("nested/*",))
    assert sorted(p.relative_to(local).as_posix() for p in local.rglob("*") if p.is_file()) == \
        [MANIFEST, "nested/more.bin"]
    time.sleep(0.01)
    (remote_dir / "store" / "bpe" / "k9" / "data.txt").write_text("remote CONTENT")  # corrupted in the store
    with pytest.raises(OSError, match="data.txt does not match its manifest"):
        partial.local_path("bpe", "k9")
    assert not (local / "data.txt").exists() and not list(local.glob("data.txt.download-*"))
    assert store.status("bpe", "k9").state == ArtifactState.INVALID  # newer than the manifest


def test_file_uri_root(tmp_path):
    store = ArtifactStore(f"file://{tmp_path}/uri-store")
    staging = store.staging_dir("clean", "k1")
    _stage_output(staging)
    store.commit("clean", "k1", staging, {})
    assert store.status("clean", "k1").state == ArtifactState.CACHED
    assert (tmp_path / "uri-store" / "clean" / "k1" / "data.txt").is_file()


def test_a_store_unpickled_in_another_working_directory_names_the_same_place(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    store = ArtifactStore("artifacts")  # relative, as configs give it
    (tmp_path / "elsewhere").mkdir()
    monkeypatch.chdir(tmp_path / "elsewhere")  # e.g. a Ray Train worker's trial directory
    assert pickle.loads(pickle.dumps(store)).path("tokenize", "k") == str(tmp_path / "artifacts" / "tokenize" / "k")


@pytest.mark.parametrize("remote", [False, True], ids=["local", "object store"])
def test_a_committed_artifact_is_never_replaced_by_a_later_commit_of_its_key(tmp_path, remote):
    """Two runs that both computed a key (one lost its lease): the first commit stands,
    whole, and the second's staging is dropped."""
    if remote:
        (tmp_path / "remote").mkdir()
        store = ArtifactStore("store", local_cache=tmp_path / "cache",
                              filesystem=pafs.SubTreeFileSystem(str(tmp_path / "remote"), pafs.LocalFileSystem()))
    else:
        store = ArtifactStore(str(tmp_path / "store"))
    first = store.staging_dir("train", "k1")
    _stage_output(first, "first run")
    store.commit("train", "k1", first, {"metrics": {"run": 1}})
    second = store.staging_dir("train", "k1")
    _stage_output(second, "second run, other bytes")
    status = store.commit("train", "k1", second, {"metrics": {"run": 2}})
    assert status.state == ArtifactState.CACHED and not second.exists()
    assert store.read_manifest("train", "k1")["metrics"] == {"run": 1}
    assert store.status("train", "k1", verify=True).state == ArtifactState.CACHED
    assert (store.local_path("train", "k1") / "data.txt").read_text() == "first run"


def test_a_cached_copy_written_to_after_its_check_is_fetched_again(tmp_path):
    """A byte flipped in a node's cached copy (same size) is not trusted: the copy's
    modification time no longer matches the one recorded when it was checked."""
    (tmp_path / "remote").mkdir()
    store = ArtifactStore("store", local_cache=tmp_path / "cache",
                          filesystem=pafs.SubTreeFileSystem(str(tmp_path / "remote"), pafs.LocalFileSystem()))
    staging = store.staging_dir("tokenize", "k1")
    _stage_output(staging, "the right bytes")
    store.commit("tokenize", "k1", staging, {})
    copy = store.local_path("tokenize", "k1") / "data.txt"
    time.sleep(0.01)
    copy.write_text("the wrong bytes")  # same length
    assert (store.local_path("tokenize", "k1") / "data.txt").read_text() == "the right bytes"
    untouched = copy.stat().st_mtime_ns
    store.local_path("tokenize", "k1")  # trusted as checked: not fetched again
    assert copy.stat().st_mtime_ns == untouched


def test_a_root_that_cannot_be_made_or_is_the_filesystem_s_own_is_refused_before_a_run(tmp_path):
    """/proc/x passed a permission check (as root) and failed at the first commit;
    ``/`` was taken, and stages wrote /download/<key>."""
    if Path("/proc").is_dir():
        with pytest.raises(OSError, match=r"^/proc/x cannot be created"):
            ArtifactStore("/proc/x").check_usable(writable=True)
    with pytest.raises(OSError, match="the filesystem's root"):
        ArtifactStore("/").check_usable(writable=True)
    ArtifactStore(str(tmp_path / "a" / "b")).check_usable(writable=True)
    assert not (tmp_path / "a").exists()  # made for the probe, and removed: a refused run leaves nothing


def test_symlinks_in_the_root_are_removed_never_followed(tmp_path):
    """A ``<key>.partial`` symlink failed the stage with rmtree's OSError; replacing a
    symlinked artifact left a stray ``<key>.invalid-*`` link behind."""
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "keep.txt").write_text("not the store's")
    store = ArtifactStore(str(tmp_path / "root"))
    (tmp_path / "root" / "clean").mkdir(parents=True)
    (tmp_path / "root" / "clean" / "k1.partial").symlink_to(outside, target_is_directory=True)
    staging = store.staging_dir("clean", "k1")
    assert staging.is_dir() and not staging.is_symlink() and (outside / "keep.txt").exists()
    (staging / "out.txt").write_text("x")
    store.commit("clean", "k1", staging, {"version": 1})
    # A committed artifact replaced by a link to a directory outside the root, then forced.
    committed = tmp_path / "root" / "clean" / "k1"
    shutil.rmtree(committed)
    committed.symlink_to(outside, target_is_directory=True)
    staging = store.staging_dir("clean", "k1")
    (staging / "out.txt").write_text("y")
    store.commit("clean", "k1", staging, {"version": 1}, replace=True)
    assert sorted(path.name for path in (tmp_path / "root" / "clean").iterdir()) == ["k1"]
    assert not committed.is_symlink() and (committed / "out.txt").read_text() == "y"
    assert (outside / "keep.txt").read_text() == "not the store's"
