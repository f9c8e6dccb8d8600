"""What the artifact store costs: checking whether artifacts are cached, and the size of
train artifacts, on a local root and on an S3 server.

For every committed artifact under ROOT (e.g. the default job's ``artifacts/``) it
times the cache check ``nmt status`` makes now (one listing: sizes and modification
times) against the check it made before (every file re-hashed, which ``nmt verify``
still does), first on the local root, then on a SeaweedFS S3 server started on
loopback with ROOT uploaded to it. For each train artifact it gives the size as
committed and the size once every checkpoint but the newest is slimmed to its fp32
weights (measured on a copy).

    python benchmarks/data/store_costs.py /path/to/artifacts
"""

from __future__ import annotations

import argparse
import fnmatch
import shutil
import sys
import tempfile
import time
from pathlib import Path

import pyarrow.fs as pafs

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from pipeline.core.artifacts import MANIFEST, ArtifactStore  # noqa: E402
from stages.shared.inference.model_file import MODEL_FILES  # noqa: E402
from stages.train import RUN_NAME  # noqa: E402
from stages.train.checkpointer import checkpoint_weights, complete_checkpoints, slim  # noqa: E402
from tests.s3_server import SeaweedS3  # noqa: E402  (the same loopback server the tests start)


def artifacts_under(root: Path) -> list[tuple[str, str]]:
    """(stage, key) of every committed artifact: train/<model> stages have two levels."""
    return sorted((str(manifest.parent.parent.relative_to(root)), manifest.parent.name)
                  for manifest in root.glob("**/" + MANIFEST) if ".partial" not in str(manifest))


def time_checks(store: ArtifactStore, artifacts: list[tuple[str, str]]) -> tuple[float, float, int]:
    """Seconds for the listing check and for re-hashing everything, and the bytes hashed."""
    started = time.perf_counter()
    states = [store.status(stage, key) for stage, key in artifacts]
    listing = time.perf_counter() - started
    started = time.perf_counter()
    verified = [store.status(stage, key, verify=True) for stage, key in artifacts]
    hashing = time.perf_counter() - started
    assert all(s.state.value == "cached" for s in states + verified), [s for s in states + verified]
    return listing, hashing, sum(s.size_bytes for s in verified)


def slimmed_size(artifact: Path) -> tuple[int, int]:
    """(bytes as committed, bytes with older checkpoints slimmed), on a copy."""
    before = sum(path.stat().st_size for path in artifact.rglob("*") if path.is_file())
    with tempfile.TemporaryDirectory() as scratch:
        copy = Path(scratch) / "artifact"
        shutil.copytree(artifact, copy)
        zero = 0  # the default job trains without ZeRO; slimming reads stage-0 model states
        checkpoints = complete_checkpoints(copy / RUN_NAME, 1, zero)
        for checkpoint in checkpoints[:-1]:
            slim(checkpoint, checkpoint_weights(checkpoint, zero))
        after = sum(path.stat().st_size for path in copy.rglob("*") if path.is_file())
    return before, after


def upload(root: Path, fs: pafs.FileSystem, prefix: str) -> None:
    """Every file under ``root``, manifests last, as a commit uploads them."""
    files = sorted((path for path in root.rglob("*") if path.is_file()), key=lambda path: path.name == MANIFEST)
    for path in files:
        with open(path, "rb") as source, fs.open_output_stream(f"{prefix}/{path.relative_to(root)}") as target:
            shutil.copyfileobj(source, target, 1 << 22)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("root", type=Path, help="a local artifact root holding committed artifacts")
    args = parser.parse_args()
    root = args.root.resolve()
    artifacts = artifacts_under(root)
    print(f"{len(artifacts)} artifacts under {root}")

    rows = [("local", *time_checks(ArtifactStore(str(root)), artifacts))]
    with tempfile.TemporaryDirectory() as scratch:
        server = SeaweedS3(Path(scratch) / "weed").start()
        try:
            fs = server.filesystem()
            started = time.perf_counter()
            upload(root, fs, "nmt-bench/artifacts")
            print(f"uploaded to SeaweedFS in {time.perf_counter() - started:.1f} s")
            store = ArtifactStore("nmt-bench/artifacts", local_cache=Path(scratch) / "cache", filesystem=fs)
            rows.append(("S3 (SeaweedFS, loopback)", *time_checks(store, artifacts)))
        finally:
            server.stop()

    print("\n| store | status now: one listing per artifact | status before: every file hashed (nmt verify) "
          "| bytes hashed |")
    print("|---|---:|---:|---:|")
    for name, listing, hashing, size in rows:
        print(f"| {name} | {listing:.2f} s | {hashing:.2f} s | {size / 2**20:,.0f} MiB |")

    print("\n| train artifact | as committed before | older checkpoints slimmed (now) "
          "| fetched to decode before | fetched to decode now |")
    print("|---|---:|---:|---:|---:|")
    for stage, key in artifacts:
        if stage.startswith("train/"):
            before, after = slimmed_size(root / stage / key)
            files = ArtifactStore(str(root)).read_manifest(stage, key)["files"]
            serving = sum(entry["size"] for name, entry in files.items()
                          if any(fnmatch.fnmatch(name, pattern) for pattern in MODEL_FILES))
            print(f"| {stage} | {before / 2**20:,.1f} MiB | {after / 2**20:,.1f} MiB | {before / 2**20:,.1f} MiB "
                  f"| {serving / 2**20:,.1f} MiB |")


if __name__ == "__main__":
    main()
