"""A subset of the fault-injection matrix (``benchmarks/orchestration/faults.py``): one case of each
kind no other test injects: the S3 server restarted, a full disk and a corrupted cached
copy. A killed driver is ``test_pipeline.py``'s (killed mid-stage) and
``test_multinode.py``'s (killed during training), a lost worker ``test_train.py``'s and
``test_multinode.py``'s, SIGTERM ``test_train.py``'s and ``test_slurm.py``'s, runs on one
store at once ``test_concurrent_runs.py``'s. Each case's re-run must complete with the
uninterrupted run's keys and data, nothing half-written left, the cause named where
the first run failed, and no data lost."""

from __future__ import annotations

import json
import subprocess

import pytest

from benchmarks.orchestration import faults

pytestmark = pytest.mark.slow


def can_mount_tmpfs(tmp_path) -> bool:
    target = tmp_path / "probe"
    target.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(target)],
                      capture_output=True).returncode != 0:
        return False
    subprocess.run(["umount", str(target)], check=True)
    return True


def test_a_fault_of_each_kind_is_survived_with_no_data_lost(tmp_path, multi30k, s3, monkeypatch):
    # ``s3`` only for its check that weed is installed: the matrix starts a server of its
    # own, which it stops and starts again.
    monkeypatch.setenv("NMT_MIRROR", str(multi30k))
    # The S3 restart strikes a training: the data stages commit within half a second of
    # taking their keys at this size, so a restart aimed at one can land after it has.
    cases = ["s3:train/rnn_tiny", "corrupt:clean"]
    if can_mount_tmpfs(tmp_path):  # a filesystem of its own to fill: needs mount rights
        cases.append("disk:clean")
    # --most-delay 0: each fault strikes as its stage takes its key, before it can have
    # committed, so that what survives is a fault that landed.
    rc = faults.main(["--cases", *cases, "--seed", "1", "--most-delay", "0", "--work", str(tmp_path / "work"),
                      "--json", str(tmp_path / "cases.json")])
    results = json.loads((tmp_path / "cases.json").read_text())
    assert [f"{case['kind']}:{case['stage']}" for case in results] == cases
    for case in results:
        assert case["landed"], f"{case['kind']}:{case['stage']}: the fault struck after the stage committed: {case}"
        if case["kind"] == "disk":  # a full disk fails the stage, which names it
            assert case["first"].startswith("failed") and case["cause_named"] == "yes", case
        assert case["survived"], f"{case['kind']}:{case['stage']}: {case}"
        assert case["lost"] == [] and case["leftovers"] == []
    assert rc == 0
