"""Faults survived, measured: a fault-injection matrix over the smoke graph.

For each case, the stages upstream of the target stage are copied from an uninterrupted
run of the graph as far as the chosen cases reach (so the case spends its time on the
stage it is about), ``nmt run --until STAGE``
is started, the fault is injected while the stage computes (a seeded random moment
after its lease appears), and ``nmt run`` is started again if the first did not finish.
Kinds:

- ``kill``: SIGKILL the driver and everything it started (a killed ``nmt run``);
- ``worker``: SIGKILL the stage's Ray task process (a train stage: its Ray Train
  worker), as a lost worker;
- ``s3``: stop the S3 server (SeaweedFS on loopback, the root on it) and start it again
  3 s later, while the stage computes or uploads;
- ``disk``: fill the filesystem the artifact root is on (a tmpfs of its own) while the
  stage writes its staging directory, and free it after the run ends;
- ``corrupt``: flip a byte of a node's cached copy of the stage's artifact (S3 root),
  then recompute the stage downstream of it, which reads that copy;
- ``preempt``: SIGTERM to a train stage's Ray Train worker after a seeded number of
  updates, as a preempted node's worker gets it (stages/train/preemption.py);
- ``term``: SIGTERM to the driver (``nmt run``) after a seeded number of updates, as
  Slurm's ``scancel`` or a Kubernetes eviction sends it (pipeline/driver_sigterm.py).

Updates lost, for a train stage: the last update its worker marked before the fault,
minus the update the next attempt resumed at (the stage's ``NMT_TIMELINE`` marks); all
of them where it started over. A preemption case must lose at most one.

A case survives when the run started again completes, every stage's key equals the
uninterrupted run's, every artifact verifies against its sha256, the data stages'
files have the uninterrupted run's sha256, nothing half-written or held (``.partial``,
``.lease``) is left, and a first run that failed named the cause. Data lost: a stage
whose artifact is missing, invalid or different after that.

    python benchmarks/orchestration/faults.py                       # the whole matrix
    python benchmarks/orchestration/faults.py --cases kill:clean disk:tokenize --seed 3
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import psutil
import pyarrow.fs as pafs

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from pipeline.core.artifacts import MANIFEST, ArtifactState, ArtifactStore  # noqa: E402
from pipeline.config import load_config  # noqa: E402
from pipeline.graph import plan  # noqa: E402
from tests.helpers import set_options, smoke_briefly  # noqa: E402
from tests.s3_server import SeaweedS3, kill_group  # noqa: E402  (the loopback server the tests start)

SMOKE = REPO / "configs" / "smoke.yaml"
# The smoke graph, trained briefly: each case is about one stage, not about training.
MAX_STEPS = 20
FAST = smoke_briefly(MAX_STEPS)
DATA_STAGES = ("download", "clean", "bpe", "tokenize")
# What a failed first run must say, per kind of fault.
CAUSES = {"worker": r"died|killed|SIGKILL|exit|worker", "s3": r"(?i)connect|curl|refused|AWS|S3|network|timed out",
          "disk": r"No space left on device", "term": r"SIGTERM"}
KINDS = ("kill", "worker", "s3", "disk", "corrupt", "preempt", "term")
SIGTERM_KINDS = ("preempt", "term")  # on train stages, after some updates
TIMELINE = "timeline.jsonl"


@dataclass
class Case:
    kind: str
    stage: str
    first: str = ""  # how the first run ended: completed, failed (rc), killed; corrupt: fetched (no first run)
    landed: bool = False  # the fault struck while the stage computed (its artifact not yet committed)
    rerun: str = ""
    keys_equal: bool = False
    verified: bool = False
    data_equal: bool = False
    leftovers: list[str] = field(default_factory=list)
    cause_named: str = "-"
    lost: list[str] = field(default_factory=list)
    seconds: float = 0.0
    updates_lost: int | None = None  # a train stage's; None for other stages
    signal_at: int | None = None  # the update a SIGTERM case signalled after

    @property
    def survived(self) -> bool:
        preempted_well = self.kind not in SIGTERM_KINDS or (self.updates_lost is not None and self.updates_lost <= 1)
        return (self.rerun == "completed" and self.keys_equal and self.verified and self.data_equal
                and not self.leftovers and self.cause_named != "no" and not self.lost and preempted_well)


class Root:
    """An artifact root the cases run against: a local directory or a prefix on S3."""

    def __init__(self, uri: str, fs: pafs.FileSystem, path: str, env: dict[str, str]):
        self.uri, self.fs, self.path, self.env = uri, fs, path, env

    def exists(self, relative: str) -> bool:
        return self.fs.get_file_info(f"{self.path}/{relative}").type != pafs.FileType.NotFound

    def listing(self) -> list[str]:
        infos = self.fs.get_file_info(pafs.FileSelector(self.path, recursive=True, allow_not_found=True))
        return [info.path[len(self.path) + 1:] for info in infos]

    def copy_in(self, source: Path, stages: list[tuple[str, str]]) -> None:
        """The uninterrupted run's artifacts of ``stages`` (name, key), into this root."""
        for stage, key in stages:
            directory = source / stage / key
            # The manifest last, as a commit writes it: a file newer than its manifest is not trusted.
            for path in sorted(directory.rglob("*"), key=lambda path: path.name == MANIFEST):
                if path.is_file():
                    target = f"{self.path}/{stage}/{key}/{path.relative_to(directory).as_posix()}"
                    self.fs.create_dir(target.rsplit("/", 1)[0], recursive=True)
                    with self.fs.open_output_stream(target) as stream:
                        stream.write(path.read_bytes())


def nmt_run(workdir: Path, root: Root, until: str, *extra: str) -> subprocess.Popen:
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("AWS_")}, **root.env,
           "NMT_CACHE_DIR": str(workdir / "cache"), "MLFLOW_TRACKING_URI": f"sqlite:///{workdir / 'mlflow.db'}",
           "COLUMNS": "200", "NMT_PROGRESS": "lines", "NMT_TIMELINE": str(workdir / TIMELINE)}
    command = [sys.executable, "-m", "pipeline", "run", str(SMOKE), "--artifact-root", root.uri, "--until", until,
               *set_options(FAST), *extra]
    return subprocess.Popen(command, cwd=workdir, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, start_new_session=True)


def finish(process: subprocess.Popen, timeout: float = 900) -> tuple[int, str]:
    output, _ = process.communicate(timeout=timeout)
    return process.returncode, output


def wait_for(condition, process: subprocess.Popen, timeout: float = 600, every: float = 0.01) -> bool:
    """Poll ``condition`` until true; False if the process ended or time ran out first."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        if condition():
            return True
        if process.poll() is not None:
            return False
        time.sleep(every)
    return False


def stage_processes(driver: subprocess.Popen, stage: str) -> list[psutil.Process]:
    """The stage's Ray task process, or for a train stage its Ray Train worker, among
    what ``driver`` started (never another run's)."""
    marker = "ray::RayTrainWorker" if stage.startswith("train/") else f"ray::stage:{stage}"
    found = []
    for process in psutil.Process(driver.pid).children(recursive=True):
        try:
            if marker in " ".join(process.cmdline()):
                found.append(process)
        except psutil.Error:
            pass
    return found


def update_marks(workdir: Path, stage: str) -> list[tuple[str, float]]:
    """The train stage's marks (pipeline/core/timeline.py), oldest first."""
    path = workdir / TIMELINE
    if not path.is_file():
        return []
    entries = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return [(entry["event"], entry["time"]) for entry in entries if entry["stage"] == stage]


def last_update(marks: list[tuple[str, float]]) -> int:
    return max((int(event.split()[1]) for event, _ in marks if event.startswith("update ")), default=0)


def updates_lost(workdir: Path, stage: str) -> int:
    """The last update marked before the first attempt ended, minus where the next resumed."""
    marks = update_marks(workdir, stage)
    resumed = [(event, t) for event, t in marks if event.startswith("resumed at update")]
    if not resumed:  # started over, or nothing to resume: everything before was lost
        first_again = [t for event, t in marks if event == "update 1"][1:2]
        before = [(e, t) for e, t in marks if not first_again or t < first_again[0]]
        return last_update(before) if first_again else 0
    event, at = resumed[0]
    return last_update([(e, t) for e, t in marks if t < at]) - int(event.split()[-1])


def fill(directory: Path) -> Path:
    """Write a file into ``directory`` until its filesystem is full."""
    filler = directory / "filler"
    with open(filler, "wb") as handle:
        try:
            while True:
                handle.write(b"\0" * (1 << 20))
        except OSError:
            pass
    return filler


class Matrix:
    def __init__(self, work: Path, seed: int, signal_after: int | None = None, most_delay: float = 1.0):
        self.work, self.random = work, random.Random(seed)
        self.signal_after = signal_after  # the update SIGTERM cases signal after; None: seeded
        self.most_delay = most_delay  # seconds after a stage takes its key that its fault may strike
        self.baseline_dir = work / "baseline"
        self.s3: SeaweedS3 | None = None

    # ------------------------------------------------------------------ the reference run

    def plan_graph(self) -> None:
        """The smoke graph's stages and keys (nothing runs)."""
        self.planned = plan(load_config(SMOKE, FAST), ArtifactStore(str(self.baseline_dir / "artifacts")),
                            until="report")
        self.keys = {item.stage.name: item.key for item in self.planned}

    def baseline(self, cases: list[Case]) -> None:
        """One uninterrupted run of the graph as far as ``cases`` reach: the keys and files
        every case must reach (kept in ``--work`` and reused when it is there)."""
        self.baseline_dir.mkdir(parents=True, exist_ok=True)
        root = Root(str(self.baseline_dir / "artifacts"), pafs.LocalFileSystem(), str(self.baseline_dir / "artifacts"),
                    {})
        store = ArtifactStore(root.uri)
        names = self.stages()
        reached = [self.reader_of(case.stage) if case.kind == "corrupt" else case.stage for case in cases]
        until = max(reached, key=names.index)
        needed = plan(load_config(SMOKE, FAST), store, until=until)
        if any(item.will_run for item in needed):
            rc, output = finish(nmt_run(self.baseline_dir, root, until))
            if rc != 0:
                raise SystemExit(f"the uninterrupted run failed:\n{output[-3000:]}")
        self.manifests = {item.stage.name: store.read_manifest(item.stage.name, item.key) for item in needed}

    def stages(self) -> list[str]:
        return [item.stage.name for item in self.planned]

    def reader_of(self, stage: str) -> str:
        """The first stage that reads ``stage``'s artifact."""
        return next(item.stage.name for item in self.planned if stage in item.upstream_keys)

    def upstream_of(self, stage: str) -> list[tuple[str, str]]:
        names = self.stages()
        return [(name, self.keys[name]) for name in names[:names.index(stage)]]

    # ------------------------------------------------------------------ roots

    def local_root(self, case_dir: Path) -> Root:
        path = case_dir / "artifacts"
        return Root(str(path), pafs.LocalFileSystem(), str(path), {})

    def s3_root(self, case_dir: Path) -> Root:
        if self.s3 is None:
            self.s3 = SeaweedS3(self.work / "seaweedfs").start()
        prefix = f"faults/{case_dir.name}"
        fs = self.s3.filesystem()
        fs.create_dir("faults")  # the bucket
        fs.delete_dir_contents(prefix, missing_dir_ok=True)  # a case tried before in the same --work
        return Root(self.s3.uri(prefix), fs, prefix, self.s3.env())

    # ------------------------------------------------------------------ one case

    def run_case(self, case: Case) -> Case:
        started = time.time()
        case_dir = self.work / f"{case.kind}-{case.stage.replace('/', '-')}"
        shutil.rmtree(case_dir, ignore_errors=True)  # a case tried before in the same --work
        case_dir.mkdir()
        mount = None
        if case.kind == "disk":
            mount = case_dir / "mnt"
            mount.mkdir()
            subprocess.run(["mount", "-t", "tmpfs", "-o", "size=256m", "tmpfs", str(mount)], check=True)
            root = Root(str(mount / "artifacts"), pafs.LocalFileSystem(), str(mount / "artifacts"), {})
        elif case.kind in ("s3", "corrupt"):
            root = self.s3_root(case_dir)
        else:
            root = self.local_root(case_dir)
        try:
            if case.kind == "corrupt":
                self._corrupt(case, case_dir, root)
            else:
                self._interrupt(case, case_dir, root)
            self._check(case, root)
        finally:
            if mount is not None:
                subprocess.run(["umount", "-l", str(mount)], check=False)
        case.seconds = time.time() - started
        return case

    def _interrupt(self, case: Case, case_dir: Path, root: Root) -> None:
        root.copy_in(self.baseline_dir / "artifacts", self.upstream_of(case.stage))
        key = self.keys[case.stage]
        lease, committed = f"{case.stage}/{key}.lease", f"{case.stage}/{key}/{MANIFEST}"
        victim = nmt_run(case_dir, root, case.stage)
        filler = None
        if case.kind in SIGTERM_KINDS:
            drawn = self.random.randint(2, MAX_STEPS - 2)  # drawn either way: the other cases' moments stay
            case.signal_at = drawn if self.signal_after is None else self.signal_after
            if wait_for(lambda: last_update(update_marks(case_dir, case.stage)) >= case.signal_at, victim):
                case.landed = True
                if case.kind == "preempt":
                    for process in stage_processes(victim, case.stage):
                        process.send_signal(signal.SIGTERM)
                else:
                    victim.send_signal(signal.SIGTERM)
        elif wait_for(lambda: root.exists(lease), victim, every=0.01 if root.env == {} else 0.05):
            time.sleep(self.random.uniform(0.0, self.most_delay))
            case.landed = not root.exists(committed)
            if case.kind == "kill":
                os.killpg(victim.pid, signal.SIGKILL)
            elif case.kind == "worker":
                for process in stage_processes(victim, case.stage):
                    process.kill()
            elif case.kind == "s3":
                self.s3.stop()
                time.sleep(3)
                self.s3.start()
            elif case.kind == "disk":
                filler = fill(Path(root.path).parent)
        rc, output = finish(victim)
        (case_dir / "first_run.log").write_text(output)  # what the interrupted run said, to look into a case
        if filler is not None:
            filler.unlink()
        case.first = "killed" if case.kind == "kill" else ("completed" if rc == 0 else f"failed ({rc})")
        if rc not in (0, -signal.SIGKILL) and case.kind in CAUSES:
            case.cause_named = "yes" if re.search(CAUSES[case.kind], output) else "no"
        if rc != 0:
            again_rc, again = finish(nmt_run(case_dir, root, case.stage))
            (case_dir / "rerun.log").write_text(again)
            case.rerun = "completed" if again_rc == 0 else f"failed ({again_rc}): {again[-300:]}"
        else:
            case.rerun = "completed"
        if case.stage.startswith("train/"):
            case.updates_lost = updates_lost(case_dir, case.stage)

    def _corrupt(self, case: Case, case_dir: Path, root: Root) -> None:
        """Recompute the stage after ``case.stage`` from a cached copy with a flipped byte."""
        downstream = self.reader_of(case.stage)
        root.copy_in(self.baseline_dir / "artifacts", self.upstream_of(downstream))
        # The node's cached copy, fetched as the reader's stage task fetches its input
        # (``pipeline.runner``: ``store.local_path`` with the files the reader reads)
        # into the cache its ``nmt run`` uses (NMT_CACHE_DIR of ``nmt_run``).
        reader = next(item.stage for item in self.planned if item.stage.name == downstream)
        cache = ArtifactStore(root.path, local_cache=case_dir / "cache" / "artifacts", filesystem=root.fs)
        copy = cache.local_path(case.stage, self.keys[case.stage], reader.reads.get(case.stage))
        case.landed = True
        case.first = "fetched"
        victim = max((path for path in copy.rglob("*") if path.is_file() and path.name != MANIFEST),
                     key=lambda path: path.stat().st_size)
        data = bytearray(victim.read_bytes())
        data[len(data) // 2] ^= 0xFF
        victim.write_bytes(bytes(data))
        rc, output = finish(nmt_run(case_dir, root, downstream, "--force", downstream))
        case.rerun = "completed" if rc == 0 else f"failed ({rc}): {output[-300:]}"
        expected = self.manifests[case.stage]["files"][str(victim.relative_to(copy))]["sha256"]
        if hashlib.sha256(victim.read_bytes()).hexdigest() != expected:
            case.lost.append(f"{case.stage}: the corrupted cached copy was used")

    def _check(self, case: Case, root: Root) -> None:
        store = ArtifactStore(root.path, local_cache=self.work / "check-cache" / root.path.replace("/", "_"),
                              filesystem=root.fs)
        names = self.stages()
        last = names.index(self.reader_of(case.stage) if case.kind == "corrupt" else case.stage)
        upto = names[:last + 1]
        planned = {item.stage.name: item for item in plan(load_config(SMOKE, FAST), store, until=names[last])}
        case.keys_equal = all(planned[name].key == self.keys[name] for name in upto)
        case.verified = True
        case.data_equal = True
        for name in upto:
            status = store.status(name, self.keys[name], verify=True)
            if status.state != ArtifactState.CACHED:
                case.verified = False
                case.lost.append(f"{name}: {status.state.value} {status.reason}".strip())
                continue
            if name in DATA_STAGES:
                files = store.read_manifest(name, self.keys[name])["files"]
                if {n: e["sha256"] for n, e in files.items()} != \
                        {n: e["sha256"] for n, e in self.manifests[name]["files"].items()}:
                    case.data_equal = False
                    case.lost.append(f"{name}: files differ from the uninterrupted run's")
        case.leftovers = [path for path in root.listing()
                          if re.search(r"\.(partial|lease|invalid-|expired-)", path) and "/filler" not in path]

    def close(self) -> None:
        if self.s3 is not None:
            self.s3.stop()


def all_cases(stages: list[str]) -> list[Case]:
    """Every stage killed and its worker lost; the object store restarted and the disk
    filled during a data stage, a training and the report; a cached copy corrupted
    under a data stage and a trained model; every train stage's worker, and the driver
    during every train stage, sent SIGTERM."""
    cases = [Case("kill", stage) for stage in stages] + [Case("worker", stage) for stage in stages]
    trains = [stage for stage in stages if stage.startswith("train/")]
    cases += [Case("s3", stage) for stage in ("tokenize", trains[0], "report")]
    cases += [Case("disk", stage) for stage in ("clean", trains[-1], "report")]
    cases += [Case("corrupt", stage) for stage in ("tokenize", trains[0])]
    cases += [Case(kind, stage) for kind in SIGTERM_KINDS for stage in trains]
    return cases


def table(cases: list[Case]) -> str:
    rows = ["| case | fault landed | first run | re-run | keys | sha256 | left over | cause named | survived | "
            "data lost | updates lost | s |", "|:--|:--|:--|:--|:--|:--|:--|:--|:--|:--|--:|--:|"]
    for case in cases:
        rows.append(f"| {case.kind}:{case.stage} | {'yes' if case.landed else 'no'} | {case.first} | "
                    f"{case.rerun[:40]} | {'equal' if case.keys_equal else 'DIFFER'} | "
                    f"{'equal' if case.data_equal and case.verified else 'DIFFER'} | "
                    f"{', '.join(case.leftovers) or '-'} | {case.cause_named} | "
                    f"{'yes' if case.survived else 'NO'} | {len(case.lost)} | "
                    f"{'-' if case.updates_lost is None else case.updates_lost}"
                    f"{'' if case.signal_at is None else f' (signal after update {case.signal_at})'} | "
                    f"{case.seconds:.0f} |")
    survived = sum(case.survived for case in cases)
    lost = sum(len(case.lost) for case in cases)
    rows.append("")
    rows.append(f"cases tried {len(cases)}, survived {survived}, data lost {lost} "
                f"(faults that landed while their stage computed: {sum(case.landed for case in cases)})")
    return "\n".join(rows)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cases", nargs="*", help="kind:stage, e.g. kill:clean (default: the whole matrix)")
    parser.add_argument("--seed", type=int, default=0, help="seeds the moment each fault strikes")
    parser.add_argument("--work", type=Path, help="working directory (default: a temporary one, removed)")
    parser.add_argument("--json", type=Path, help="also write the cases as JSON here")
    parser.add_argument("--signal-after", type=int,
                        help="the update preempt and term cases signal after (default: seeded, 2 to "
                             f"{MAX_STEPS - 2}), to repeat one")
    parser.add_argument("--most-delay", type=float, default=1.0,
                        help="the other cases strike at a seeded moment up to this many seconds after their stage "
                             "took its key (0: at once, while it surely computes)")
    args = parser.parse_args(argv)
    work = args.work or Path(tempfile.mkdtemp(prefix="nmt-faults-"))
    work.mkdir(parents=True, exist_ok=True)
    multi30k = os.environ.get("NMT_MIRROR")
    if not multi30k:
        raise SystemExit("set NMT_MIRROR to a directory with the Multi30k files (docs/running.md: the offline corpus directory)")
    matrix = Matrix(work, args.seed, args.signal_after, args.most_delay)
    started = time.time()
    try:
        matrix.plan_graph()
        cases = ([Case(*spec.split(":", 1)) for spec in args.cases] if args.cases
                 else all_cases(matrix.stages()))
        unknown = [f"{c.kind}:{c.stage}" for c in cases if c.kind not in KINDS or c.stage not in matrix.stages()]
        if unknown:
            raise SystemExit(f"unknown case(s) {', '.join(unknown)}: kinds {', '.join(KINDS)}, stages "
                             f"{', '.join(matrix.stages())}")
        matrix.baseline(cases)
        for index, case in enumerate(cases, 1):
            try:
                matrix.run_case(case)
            except Exception as error:  # the harness's own failure: the case counts as not survived
                case.rerun = f"not checked: {type(error).__name__}: {error}"
            print(f"[{index}/{len(cases)}] {case.kind}:{case.stage}: {'survived' if case.survived else 'NOT survived'}"
                  f" ({case.seconds:.0f} s){'; lost: ' + '; '.join(case.lost) if case.lost else ''}", flush=True)
    finally:
        matrix.close()
    print()
    print(table(cases))
    print(f"\nwall time {time.time() - started:.0f} s")
    if args.json:
        args.json.write_text(json.dumps([{**case.__dict__, "survived": case.survived} for case in cases], indent=2))
    if not args.work:
        shutil.rmtree(work, ignore_errors=True)
    return 0 if all(case.survived for case in cases) else 1


if __name__ == "__main__":
    sys.exit(main())
