"""The whole data graph through the CLI: a real local Ray instance, MLflow on SQLite,
the shipped smoke config reading Multi30k through a mirror directory."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

from pipeline.core.artifacts import ArtifactState, ArtifactStore
from pipeline.config import load_config
from pipeline.graph import plan
from tests.helpers import REPO, kill_everything_below, nmt, slice_multi30k, small_config, write_config

SMOKE = REPO / "configs" / "smoke.yaml"
STAGES = ["download", "clean", "bpe", "tokenize"]
pytestmark = pytest.mark.slow


def stage_runs(workdir: Path, experiment: str = "smoke") -> list[dict]:
    """Per nmt run (oldest first): {stage: cache_hit} from the nested MLflow runs."""
    client = MlflowClient(f"sqlite:///{workdir / 'mlflow.db'}")
    experiment_id = client.get_experiment_by_name(experiment).experiment_id
    runs = client.search_runs([experiment_id], order_by=["attributes.start_time ASC"], max_results=1000)
    parents = [run for run in runs if "mlflow.parentRunId" not in run.data.tags]
    return [{child.data.tags["nmt.stage"]: child.data.tags["nmt.cache_hit"] == "true"
             for child in runs if child.data.tags.get("mlflow.parentRunId") == parent.info.run_id}
            for parent in sorted(parents, key=lambda run: run.info.start_time)]


def manifests(workdir: Path) -> dict[str, int]:
    return {str(path.relative_to(workdir)): path.stat().st_mtime_ns
            for path in (workdir / "artifacts").glob("*/*/MANIFEST.json")}


def test_cached_rerun_recomputes_nothing_and_a_setting_reruns_only_its_stage(workdir):
    first = nmt("run", str(SMOKE), "--until", "tokenize")
    assert first.exit_code == 0, first.output
    assert stage_runs(workdir) == [dict.fromkeys(STAGES, False)]
    written = manifests(workdir)
    assert len(written) == 4

    second = nmt("run", str(SMOKE), "--until", "tokenize")
    assert second.exit_code == 0, second.output
    assert stage_runs(workdir)[-1] == dict.fromkeys(STAGES, True)
    assert manifests(workdir) == written  # nothing rewritten

    third = nmt("run", str(SMOKE), "--until", "tokenize", "--set", "tokenize.shards=3")
    assert third.exit_code == 0, third.output
    assert stage_runs(workdir)[-1] == {"download": True, "clean": True, "bpe": True, "tokenize": False}
    assert len(list((workdir / "artifacts" / "tokenize").glob("*/train-*-of-00003.arrow"))) == 3
    assert {k: v for k, v in manifests(workdir).items() if k in written} == written

    before_force = manifests(workdir)
    forced = nmt("run", str(SMOKE), "--until", "tokenize", "--force", "bpe")
    assert forced.exit_code == 0, forced.output
    assert stage_runs(workdir)[-1] == {"download": True, "clean": True, "bpe": False, "tokenize": False}
    rewritten = {path for path, mtime in manifests(workdir).items() if before_force.get(path) != mtime}
    assert {path.split("/")[1] for path in rewritten} == {"bpe", "tokenize"}  # recomputed, committed again

    status = nmt("status", str(SMOKE))
    assert status.exit_code == 0
    # The data stages are cached; the smoke config's models are not trained or evaluated
    # yet, and there is no report.
    models = len(load_config(SMOKE).models)
    assert status.output.count("│ cached ") == 4 and status.output.count("│ missing") == 2 * models + 1


def test_mlflow_records_params_metrics_and_reports_per_stage(workdir):
    assert nmt("run", str(SMOKE), "--until", "tokenize").exit_code == 0
    client = MlflowClient(f"sqlite:///{workdir / 'mlflow.db'}")
    experiment_id = client.get_experiment_by_name("smoke").experiment_id
    runs = client.search_runs([experiment_id])
    parent = next(run for run in runs if "mlflow.parentRunId" not in run.data.tags)
    children = {run.data.tags["nmt.stage"]: run for run in runs if "mlflow.parentRunId" in run.data.tags}
    assert parent.info.status == "FINISHED" and set(children) == set(STAGES)
    clean = children["clean"]
    assert clean.data.params["max_words"] == "80"
    assert clean.data.metrics["train_pairs"] + sum(
        value for name, value in clean.data.metrics.items() if name.startswith("removed_")) == 3000
    assert children["tokenize"].data.metrics["pairs_per_second"] > 0
    key = children["bpe"].data.tags["nmt.artifact_key"]
    assert (workdir / "artifacts" / "bpe" / key / "MANIFEST.json").is_file()
    report_path = client.download_artifacts(clean.info.run_id, "stage_report.json", str(workdir))
    report = json.loads(Path(report_path).read_text())
    assert report["stage"] == "clean" and report["metrics"]["train_pairs"] == clean.data.metrics["train_pairs"]
    assert "resolved_config.yaml" in [f.path for f in client.list_artifacts(parent.info.run_id)]


def test_a_failing_stage_commits_nothing_and_upstream_artifacts_are_reused(workdir, multi30k):
    corpus = slice_multi30k(multi30k, workdir / "corpus", {"train": 300, "val": 20, "test_2016_flickr": 20})
    config = write_config(workdir / "exp.yaml", small_config(corpus, bpe={"vocab_size": 50_000}))
    failed = nmt("run", str(config))
    assert failed.exit_code == 1
    output = " ".join(failed.output.split())
    assert "stage 'bpe' failed" in output and "lower bpe.vocab_size" in output, output[-2000:]
    store = ArtifactStore(str(workdir / "artifacts"))
    states = {item.stage.name: item.status.state for item in plan(load_config(config), store)}
    assert states == {"download": ArtifactState.CACHED, "clean": ArtifactState.CACHED,
                      "bpe": ArtifactState.MISSING, "tokenize": ArtifactState.MISSING}

    fixed = nmt("run", str(config), "--set", "bpe.vocab_size=300")
    assert fixed.exit_code == 0, fixed.output
    assert stage_runs(workdir, "test")[-1] == {"download": True, "clean": True, "bpe": False, "tokenize": False}


def test_bad_input_file_fails_with_its_name_and_line(workdir, multi30k):
    corpus = slice_multi30k(multi30k, workdir / "corpus", {"train": 50, "val": 20, "test_2016_flickr": 20})
    with open(corpus / "train.de", "ab") as handle:
        handle.write(b"kaputt \xff\n")
    config = write_config(workdir / "exp.yaml", small_config(corpus))
    result = nmt("run", str(config))
    assert result.exit_code == 1
    assert f"{corpus / 'train.de'}: line 51: invalid UTF-8" in " ".join(result.output.split())
    assert not list((workdir / "artifacts").glob("download/*/MANIFEST.json"))


# Each kill lands inside a stage's parallel part: clean with slices' survivors already in
# its scratch folder, tokenize with shard files half written.
KILL_POINTS = {"clean": "clean/*.partial/_train_slices/*.arrow", "tokenize": "tokenize/*.partial/train-*.arrow"}


@pytest.mark.parametrize("stage", ["clean", "tokenize"])
def test_run_killed_mid_stage_then_rerun_completes_with_the_same_keys(tmp_path, multi30k, stage):
    """A real `nmt run` process on 8,000 Multi30k training pairs (clean in 15 tasks),
    SIGKILLed while a stage is writing its staging directory."""
    env = {**os.environ, "NMT_MIRROR": str(multi30k), "NMT_CACHE_DIR": str(tmp_path / "cache"),
           "MLFLOW_TRACKING_URI": f"sqlite:///{tmp_path / 'mlflow.db'}"}
    config = REPO / "configs" / "multi30k_en_de.yaml"
    settings = ["download.train.max_pairs=8000", "bpe.vocab_size=2000", "clean.rows_per_task=540"]
    command = [sys.executable, "-m", "pipeline", "run", str(config), "--until", "tokenize",
               "--artifact-root", str(tmp_path / "artifacts"), *[arg for item in settings for arg in ("--set", item)]]
    victim = subprocess.Popen(command, cwd=tmp_path, env=env, start_new_session=True,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 240
    while not list((tmp_path / "artifacts").glob(KILL_POINTS[stage])) and time.time() < deadline:
        assert victim.poll() is None, f"the run ended before the {stage} stage wrote anything"
        time.sleep(0.01)
    kill_everything_below(victim)

    store = ArtifactStore(str(tmp_path / "artifacts"))
    planned = plan(load_config(config, settings), store, until="tokenize")
    killed = STAGES.index(stage)
    # Whatever the kill interrupted is not trusted; nothing past it exists.
    assert [item.status.state for item in planned[killed:]] == [ArtifactState.MISSING] * (4 - killed)
    assert all(item.status.state != ArtifactState.INVALID for item in planned)

    rerun = subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    assert rerun.returncode == 0, rerun.stderr[-3000:]
    after = plan(load_config(config, settings), store, until="tokenize")
    assert [item.key for item in after] == [item.key for item in planned]
    assert all(item.status.state == ArtifactState.CACHED for item in after)
    assert not list((tmp_path / "artifacts").glob("*/*.partial"))
    manifest = store.read_manifest("clean", after[1].key)
    assert manifest["metrics"]["train_tasks"] == 15


def test_a_stable_phase_stopped_by_ctrl_c_resumes_and_the_branches_committed_before_stay(tmp_path, multi30k):
    """Budgets branched from one run, through `nmt run`: stopped by Ctrl-C (SIGINT) while
    the second stable segment trains, after the first budget's branch was committed. The
    run says what it kept and how to go on; the rerun keeps the first segment and branch,
    says it resumes the second segment from its checkpoint, and branches the second
    budget from it."""
    env = {**os.environ, "NMT_MIRROR": str(multi30k), "MLFLOW_TRACKING_URI": f"sqlite:///{tmp_path / 'mlflow.db'}"}
    settings = ['models=[{name: t, family: transformer, preset: tiny}]', "budgets=[4e10, 6e11]", "seeds=[1]",
                "branch_budgets=true", "train.schedule=wsd", "train.lr=2e-3", "train.warmup_steps=10",
                "train.max_steps=null", "train.max_train_flops=6e11", "train.checkpoint_every=25",
                "train.valid_bleu_every=null", "train.precision=fp32"]
    command = [sys.executable, "-m", "pipeline", "run", str(SMOKE), "--until", "train",
               "--artifact-root", str(tmp_path / "artifacts"), *[arg for item in settings for arg in ("--set", item)]]
    artifacts = tmp_path / "artifacts" / "train"
    with open(tmp_path / "first.log", "w") as log:
        # SIGINT at its default in the run, as a shell starts a command: an ignored SIGINT
        # is inherited across exec, and this test process's own disposition is not a
        # user's (twice under -n 2 the run went on to its end through the signal).
        victim = subprocess.Popen(command, cwd=tmp_path, env=env, start_new_session=True, stdout=log,
                                  stderr=subprocess.STDOUT,
                                  preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
        deadline = time.time() + 400
        # The branch committed and its result in (the driver says so), as a user sees it
        # before pressing Ctrl-C; and the second segment checkpointed.
        while not ("train/t.4e10.s1 done in" in (tmp_path / "first.log").read_text()
                   and list(artifacts.glob("t.4e10.s1/*/MANIFEST.json"))
                   and list(artifacts.glob("t.6e11.s1.stable/*.partial/train_run/checkpoint_*/progress.json"))):
            assert victim.poll() is None, "the run ended before the kill point"
            assert not list(artifacts.glob("t.6e11.s1.stable/*/MANIFEST.json")), "the second segment ended first"
            assert time.time() < deadline
            time.sleep(0.05)
        os.kill(victim.pid, signal.SIGINT)
        try:
            code = victim.wait(timeout=120)
        except subprocess.TimeoutExpired:
            os.killpg(victim.pid, signal.SIGKILL)
            code = None
    said = (tmp_path / "first.log").read_text()
    assert code == 128 + signal.SIGINT, said[-3000:]
    assert "run the same command to go on from there: nmt run" in said, said[-3000:]
    assert "train/t.6e11.s1.stable: its checkpoint at update" in said, said[-3000:]
    kept = {path: path.stat().st_mtime_ns for path in artifacts.glob("*/*/MANIFEST.json")}
    assert {path.parent.parent.name for path in kept} == {"t.4e10.s1.stable", "t.4e10.s1"}

    rerun = subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    assert rerun.returncode == 0, rerun.stderr[-3000:]
    assert "train t.6e11.s1.stable: resumed from its checkpoint at update" in rerun.stdout + rerun.stderr
    assert {path: path.stat().st_mtime_ns for path in kept} == kept  # not recomputed
    store = ArtifactStore(str(tmp_path / "artifacts"))
    planned = {item.stage.name: item for item in plan(load_config(SMOKE, settings), store, until="train")}
    assert all(item.status.state == ArtifactState.CACHED for item in planned.values())
    segment = store.read_manifest("train/t.6e11.s1.stable", planned["train/t.6e11.s1.stable"].key)["metrics"]
    branch = store.read_manifest("train/t.6e11.s1", planned["train/t.6e11.s1"].key)["metrics"]
    assert segment["restarts"] == 1 and segment["stop_reason"] == "stable_phase_end"
    assert branch["continued_from"] == "train/t.6e11.s1.stable" and branch["continued_at_step"] == segment["steps"]
    assert branch["stop_reason"] == "max_train_flops" and branch["own_train_flops"] < 0.25 * branch["train_flops"]
