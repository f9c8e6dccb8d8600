"""What a train stage costs besides training, and what queued train stages hold.

1. Fixed cost. One ``nmt run`` of several seeds of the smoke config's Transformer for a
   few updates each, one stage after another (each on all CPUs), after their data
   stages, with ``NMT_TIMELINE`` set (pipeline/core/timeline.py): the table gives, per
   stage, the seconds between the marks the stage task and its rank-0 worker leave,
   from the stage's task starting to its first update and from its last update to its
   commit. Those two ends are the stage's fixed cost; the first stage of a run also
   pays what a fresh Ray instance does once. Measured for each of ``--launchers``: Ray
   Train's worker group, and the stage's own process (``train.in_process``), side by
   side in one table at the end.
2. Memory against queued runs. For each N of ``--queued``, one ``nmt run`` of N seeds
   of that model (a few updates each) on the local Ray instance it starts; every half
   second the proportional set size (PSS: each shared page split among the processes
   that map it) of the run's whole process tree (the driver and every Ray process it
   started) is summed. The table gives the peak, the most processes at
   once and the wall time: with train stages admitted only when their workers fit
   (pipeline/admission.py) the peak should not grow with N.

3. Sweep scale (``--sweep N``). A graph of N train stages (seeds of that model, a few
   updates each): planned with ``nmt status``, run and killed with SIGKILL once
   ``--kill-after`` have committed, then run again to its end. The table gives each
   step's wall time, peak PSS and most processes, the Ray processes the kill left
   behind, and the cache hits of the second run.

    python benchmarks/orchestration/stage_overhead.py --root /tmp/overhead --queued 2 8 32
    python benchmarks/orchestration/stage_overhead.py --root /tmp/overhead --queued            # the fixed cost alone
    python benchmarks/orchestration/stage_overhead.py --root /tmp/sweep --fixed-cost-stages 0 --queued --sweep 200

The smoke config reads Multi30k from a mirror: NMT_MIRROR (or NMT_CORPORA/multi30k).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import psutil
import yaml

REPO = Path(__file__).resolve().parents[2]
SMOKE = REPO / "configs" / "smoke.yaml"
# Consecutive marks and what lies between them (pipeline/runner.py, stages/train/).
PHASES = (
    ("task started", "inputs ready", "lease, staging directory, inputs"),
    ("inputs ready", "fit started", "stage imports, trainer built"),
    ("fit started", "worker started", "Ray Train controller and worker group"),
    ("worker started", "data ready", "worker: device, tokenized data"),
    ("data ready", "engine ready", "worker: model, plan, DeepSpeed engine, checkpoint"),
    ("engine ready", "first update", "worker: loop set up, first update"),
    ("last update", "validated", "final validation (loss, BLEU)"),
    ("validated", "checkpointed", "final checkpoint"),
    ("checkpointed", "fit returned", "Ray Train teardown"),
    ("fit returned", "committed", "outputs written, artifact committed"),
)
# What trains a stage: Ray Train's worker group, or the stage's own process (train.in_process).
LAUNCHERS = {"ray_train": False, "in_process": True}
BEFORE_FIRST_UPDATE = {"task started", "inputs ready", "fit started", "worker started", "data ready", "engine ready"}


def config_for(root: Path, seeds: list[int], steps: int, in_process: bool = False) -> Path:
    raw = yaml.safe_load(SMOKE.read_text())
    raw["models"] = [model for model in raw["models"] if model["family"] == "transformer"]
    raw["seeds"] = seeds
    raw["train"].update(precision="fp32", max_steps=steps, warmup_steps=1, valid_every=steps,
                        checkpoint_every=steps, log_every=1, in_process=in_process)
    for key in ("max_train_flops", "valid_bleu_every"):
        raw["train"].pop(key, None)
    path = root / f"overhead_{len(seeds)}.yaml"
    path.write_text(yaml.safe_dump(raw, sort_keys=False))
    return path


def process_tree_pss(pid: int) -> tuple[int, int]:
    """(PSS bytes, processes) of ``pid`` and every process below it; (0, 0) once gone."""
    try:
        tree = [psutil.Process(pid), *psutil.Process(pid).children(recursive=True)]
    except psutil.NoSuchProcess:
        return 0, 0
    pss = 0
    for process in tree:
        try:  # proportional set size: a library shared by many processes counted once
            pss += process.memory_full_info().pss
        except psutil.Error:
            pass
    return pss, len(tree)


def nmt_run(config: Path, root: Path, until: str, env: dict, *extra: str, kill_when=None,
            every: float = 0.5, tree: set[int] | None = None) -> tuple[float, float, int, str]:
    """Runs ``nmt run``, sampling its process tree's memory every ``every`` seconds, and
    kills the driver with SIGKILL once ``kill_when()`` is true (adding the pids below it
    then to ``tree``). Returns (seconds, peak PSS bytes, most processes, stderr)."""
    command = [sys.executable, "-m", "pipeline", "run", str(config), "--until", until,
               "--artifact-root", str(root / "artifacts"), *extra]
    started = time.perf_counter()
    run = subprocess.Popen(command, cwd=root, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    stderr = []  # read on a thread: a full pipe would stall the run
    reader = threading.Thread(target=lambda: stderr.extend(line.decode(errors="replace") for line in run.stderr))
    reader.start()
    peak, most = 0, 0
    while run.poll() is None:
        pss, processes = process_tree_pss(run.pid)
        peak, most = max(peak, pss), max(most, processes)
        if kill_when is not None and kill_when():
            try:  # the processes the kill should take with it
                tree.update(child.pid for child in psutil.Process(run.pid).children(recursive=True))
            except psutil.NoSuchProcess:
                pass
            run.send_signal(signal.SIGKILL)
            run.wait()
            break
        time.sleep(every)
    reader.join()
    text = "".join(stderr)
    if run.returncode != 0 and kill_when is None:
        sys.exit(f"nmt run failed ({run.returncode}):\n{text[-3000:]}")
    return time.perf_counter() - started, peak, most, text


def committed(root: Path, stage: str) -> int:
    """How many artifacts of ``stage`` (train, ...) the root holds committed."""
    return sum(1 for path in (root / "artifacts" / stage).glob("*/*") if path.is_dir() and "." not in path.name)


def survivors(pids: set[int]) -> list[int]:
    """Which of ``pids`` are still running (a killed driver's Ray processes should not be)."""
    alive = []
    for pid in pids:
        try:
            if psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
                alive.append(pid)
        except psutil.NoSuchProcess:
            pass
    return alive


def sweep(root: Path, env: dict, runs: int, steps: int, kill_after: int) -> None:
    """A graph of ``runs`` train stages: planned (``nmt status``), run and killed with
    SIGKILL once ``kill_after`` have committed, then run again to its end, which must
    find those committed and train the rest."""
    config = config_for(root, list(range(1000, 1000 + runs)), steps)
    base = [sys.executable, "-m", "pipeline"]
    started = time.perf_counter()
    status = subprocess.run([*base, "status", str(config), "--artifact-root", str(root / "artifacts")],
                            cwd=root, env={**env, "COLUMNS": "200"}, capture_output=True, text=True, check=True)
    planned = sum(1 for line in status.stdout.splitlines() if "train/" in line)
    plan_seconds = time.perf_counter() - started
    before = committed(root, "train")
    print(f"\nA graph of {runs} train stages ({steps} updates each), planned, killed, resumed\n")
    print("| step | wall s | peak PSS, GB (driver + Ray) | most processes | train stages committed |")
    print("|---|---:|---:|---:|---:|")
    print(f"| plan (`nmt status`): {planned} train stages listed | {plan_seconds:.1f} | - | - | 0 |", flush=True)
    tree: set[int] = set()
    first = nmt_run(config, root, "train", env, kill_when=lambda: committed(root, "train") - before >= kill_after,
                    every=2.0, tree=tree)
    at_kill = committed(root, "train") - before
    print(f"| run, SIGKILL to the driver after {kill_after} commits | {first[0]:.0f} | {first[1] / 1e9:.2f} | "
          f"{first[2]} | {at_kill} |", flush=True)
    deadline = time.time() + 60
    while survivors(tree) and time.time() < deadline:  # Ray's own processes follow the driver out
        time.sleep(1)
    left = survivors(tree)
    print(f"| the killed run's processes alive 60 s after the kill (of {len(tree)}) | - | - | {len(left)} | - |",
          flush=True)
    for pid in left:
        try:
            print(f"left running: pid {pid}: {' '.join(psutil.Process(pid).cmdline())[:100]}")
        except psutil.NoSuchProcess:
            pass
    second = nmt_run(config, root, "train", env, every=2.0)
    hits = sum(1 for line in second[3].splitlines() if "train/" in line and "cache hit" in line)
    total = committed(root, "train") - before
    print(f"| run again to the end: {hits} train stages cache hits | {second[0]:.0f} | {second[1] / 1e9:.2f} | "
          f"{second[2]} | {total} |")
    if total != runs:
        sys.exit(f"only {total} of {runs} train stages committed")


def fixed_cost(root: Path, env: dict, steps: int, stages: int, in_process: bool) -> list[dict[str, float]]:
    """The phases of ``stages`` train stages run one after another in one ``nmt run``:
    each takes both CPUs, so none waits for another's. The first pays what a Ray
    instance does once (its stage process's imports, Ray Train's autoscaling
    coordinator); the later ones are what each stage of a sweep pays."""
    timeline = root / "timeline.jsonl"
    timeline.unlink(missing_ok=True)
    config = config_for(root, list(range(1, stages + 1)), steps, in_process)
    raw = yaml.safe_load(config.read_text())
    raw["train"]["cpus_per_worker"] = os.cpu_count()
    config.write_text(yaml.safe_dump(raw, sort_keys=False))
    nmt_run(config, root, "train", {**env, "NMT_TIMELINE": str(timeline)}, "--force", "train")
    marks: dict[str, dict[str, float]] = {}
    for line in timeline.read_text().splitlines():
        entry = json.loads(line)
        if entry["stage"].startswith("train/"):
            marks.setdefault(entry["stage"], {}).setdefault(entry["event"], entry["time"])
    ordered = sorted(marks.values(), key=lambda stage: stage["task started"])
    return [{f"{start} -> {end}: {what}": stage[end] - stage[start] for start, end, what in PHASES
             if start in stage and end in stage} for stage in ordered]


def ends(stages: list[dict[str, float]]) -> tuple[list[float], list[float]]:
    """Per stage: seconds from its task starting to its first update, and from its last
    update to its commit."""
    before = [sum(s for name, s in stage.items() if name.split(" -> ")[0] in BEFORE_FIRST_UPDATE) for stage in stages]
    after = [sum(s for name, s in stage.items() if name.split(" -> ")[0] not in BEFORE_FIRST_UPDATE) for stage in stages]
    return before, after


def print_fixed_cost(stages: list[dict[str, float]], steps: int, launcher: str) -> None:
    print(f"\nFixed cost of a train stage, {launcher} ({steps} updates, transformer tiny, fp32), {len(stages)} "
          f"stages one after another, each on all {os.cpu_count()} CPUs\n")
    print("| phase | " + " | ".join(f"stage {number}" for number in range(1, len(stages) + 1)) + " |")
    print("|---|" + "---:|" * len(stages))
    for phase in stages[0]:
        print(f"| {phase} | " + " | ".join(f"{stage.get(phase, 0.0):.1f}" for stage in stages) + " |")
    before, after = ends(stages)
    print("| **start to first update** | " + " | ".join(f"**{s:.1f}**" for s in before) + " |")
    print("| **last update to commit** | " + " | ".join(f"**{s:.1f}**" for s in after) + " |")
    print("| **fixed cost** | " + " | ".join(f"**{b + a:.1f}**" for b, a in zip(before, after)) + " |")


def print_launchers(measured: dict[str, list[dict[str, float]]]) -> None:
    """The launchers side by side: the first stage, and the median and most of the later ones."""
    print("\nFixed cost by launcher, seconds (first stage; later stages: median, most)\n")
    print("| launcher | start to first update | last update to commit | fixed cost |\n|---|---:|---:|---:|")
    for launcher, stages in measured.items():
        before, after = ends(stages)
        cells = []
        for values in (before, after, [b + a for b, a in zip(before, after)]):
            later = sorted(values[1:])
            cells.append(f"{values[0]:.1f}; {later[len(later) // 2]:.1f}, {later[-1]:.1f}" if later
                         else f"{values[0]:.1f}")
        print(f"| {launcher} | " + " | ".join(cells) + " |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--root", type=Path, required=True, help="a scratch directory (artifacts, MLflow)")
    parser.add_argument("--queued", type=int, nargs="*", default=[2, 8, 32], help="train stages queued at once")
    parser.add_argument("--steps", type=int, default=4, help="updates of each train stage")
    parser.add_argument("--sweep", type=int, default=0, help="then a graph of this many train stages ...")
    parser.add_argument("--kill-after", type=int, default=20, help="... killed after this many commit, resumed")
    parser.add_argument("--fixed-cost-stages", type=int, default=5,
                        help="train stages timed one after another (0: none, only the memory rows and the sweep)")
    parser.add_argument("--launchers", nargs="+", choices=LAUNCHERS, default=list(LAUNCHERS),
                        help="what runs the training of the fixed-cost stages")
    args = parser.parse_args()
    args.root.mkdir(parents=True, exist_ok=True)
    mirror = os.environ.get("NMT_MIRROR") or str(Path(os.environ.get("NMT_CORPORA") or REPO / "corpora")
                                                 / "multi30k")
    # This checkout's code, whatever an installed copy points at.
    env = {**os.environ, "NMT_MIRROR": mirror, "MLFLOW_TRACKING_URI": f"sqlite:///{args.root / 'mlflow.db'}",
           "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}
    env.pop("RAY_ADDRESS", None)
    nmt_run(config_for(args.root, [1], args.steps), args.root, "tokenize", env)  # data stages, once

    if args.fixed_cost_stages:
        measured = {launcher: fixed_cost(args.root, env, args.steps, args.fixed_cost_stages, LAUNCHERS[launcher])
                    for launcher in args.launchers}
        for launcher, stages in measured.items():
            print_fixed_cost(stages, args.steps, launcher)
        print_launchers(measured)

    if args.queued:
        print("\nMemory against queued train stages\n")
        print("| queued | wall s | peak PSS, GB (driver + Ray) | most processes |\n|---:|---:|---:|---:|")
    first_seed = 100  # each row trains seeds of its own: none is a cache hit
    for queued in args.queued:
        seeds = list(range(first_seed, first_seed + queued))
        first_seed += queued
        seconds, peak, most, _ = nmt_run(config_for(args.root, seeds, args.steps), args.root, "train", env)
        print(f"| {queued} | {seconds:.0f} | {peak / 1e9:.2f} | {most} |", flush=True)
    if args.sweep:
        sweep(args.root, env, args.sweep, args.steps, args.kill_after)


if __name__ == "__main__":
    main()
