"""What a train stage costs besides training, and what queued train stages hold.

1. Fixed cost. One ``nmt run`` of the smoke config's Transformer for a few updates,
   after its data stages, with ``NMT_TIMELINE`` set (pipeline/core/timeline.py): the
   table gives the seconds between the marks the stage task and its rank-0 worker
   leave, from the stage's task starting to its first update and from its last update
   to its commit. Those two ends are the stage's fixed cost.
2. Memory against queued runs. For each N of ``--queued``, one ``nmt run`` of N seeds
   of that model (a few updates each) on the local Ray instance it starts; every half
   second the proportional set size (PSS: each shared page split among the processes
   that map it) of the run's whole process tree (the driver and every Ray process it
   started) is summed. The table gives the peak, the most processes at
   once and the wall time: with train stages admitted only when their workers fit
   (pipeline/admission.py) the peak should not grow with N.

    python benchmarks/stage_overhead.py --root /tmp/overhead --queued 2 8 32

The smoke config reads Multi30k from a mirror: NMT_MIRROR (or NMT_CORPORA/multi30k).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import psutil
import yaml

REPO = Path(__file__).resolve().parents[1]
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
BEFORE_FIRST_UPDATE = {"task started", "inputs ready", "fit started", "worker started", "data ready", "engine ready"}


def config_for(root: Path, seeds: list[int], steps: int) -> Path:
    raw = yaml.safe_load(SMOKE.read_text())
    raw["models"] = [model for model in raw["models"] if model["family"] == "transformer"]
    raw["seeds"] = seeds
    raw["train"].update(precision="fp32", max_steps=steps, warmup_steps=1, valid_every=steps,
                        checkpoint_every=steps, log_every=1)
    for key in ("max_train_flops", "valid_bleu_every"):
        raw["train"].pop(key, None)
    path = root / f"overhead_{len(seeds)}.yaml"
    path.write_text(yaml.safe_dump(raw, sort_keys=False))
    return path


def nmt_run(config: Path, root: Path, until: str, env: dict, *extra: str) -> tuple[float, float, int]:
    """Runs ``nmt run``; returns (seconds, peak PSS bytes of its process tree, most processes)."""
    command = [sys.executable, "-m", "pipeline", "run", str(config), "--until", until,
               "--artifact-root", str(root / "artifacts"), *extra]
    started = time.perf_counter()
    run = subprocess.Popen(command, cwd=root, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    peak, most = 0, 0
    while run.poll() is None:
        try:
            tree = [psutil.Process(run.pid), *psutil.Process(run.pid).children(recursive=True)]
        except psutil.NoSuchProcess:
            break
        rss = 0
        for process in tree:
            try:  # proportional set size: a library shared by many processes counted once
                rss += process.memory_full_info().pss
            except psutil.Error:
                pass
        peak, most = max(peak, rss), max(most, len(tree))
        time.sleep(0.5)
    stderr = run.stderr.read().decode(errors="replace")
    if run.returncode != 0:
        sys.exit(f"nmt run failed ({run.returncode}):\n{stderr[-3000:]}")
    return time.perf_counter() - started, peak, most


def fixed_cost(root: Path, env: dict, steps: int) -> list[tuple[str, float]]:
    timeline = root / "timeline.jsonl"
    timeline.unlink(missing_ok=True)
    config = config_for(root, [1], steps)
    nmt_run(config, root, "train", {**env, "NMT_TIMELINE": str(timeline)}, "--force", "train")
    marks = {}
    for line in timeline.read_text().splitlines():
        entry = json.loads(line)
        if entry["stage"].startswith("train/"):
            marks.setdefault(entry["event"], entry["time"])
    return [(f"{start} -> {end}: {what}", marks[end] - marks[start]) for start, end, what in PHASES
            if start in marks and end in marks]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--root", type=Path, required=True, help="a scratch directory (artifacts, MLflow)")
    parser.add_argument("--queued", type=int, nargs="*", default=[2, 8, 32], help="train stages queued at once")
    parser.add_argument("--steps", type=int, default=4, help="updates of each train stage")
    args = parser.parse_args()
    args.root.mkdir(parents=True, exist_ok=True)
    mirror = os.environ.get("NMT_MIRROR") or str(Path(os.environ.get("NMT_CORPORA", REPO.parent / "shared" / "corpora"))
                                                 / "multi30k")
    # This checkout's code, whatever an installed copy points at.
    env = {**os.environ, "NMT_MIRROR": mirror, "MLFLOW_TRACKING_URI": f"sqlite:///{args.root / 'mlflow.db'}",
           "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}
    env.pop("RAY_ADDRESS", None)
    nmt_run(config_for(args.root, [1], args.steps), args.root, "tokenize", env)  # data stages, once

    phases = fixed_cost(args.root, env, args.steps)
    before = sum(seconds for name, seconds in phases if name.split(" -> ")[0] in BEFORE_FIRST_UPDATE)
    after = sum(seconds for name, seconds in phases if name.split(" -> ")[0] not in BEFORE_FIRST_UPDATE)
    print(f"\nFixed cost of one train stage ({args.steps} updates, transformer tiny, fp32, {os.cpu_count()} CPUs)\n")
    print("| phase | s |\n|---|---:|")
    for name, seconds in phases:
        print(f"| {name} | {seconds:.1f} |")
    print(f"| **start to first update** | **{before:.1f}** |\n| **last update to commit** | **{after:.1f}** |")
    print(f"| **fixed cost** | **{before + after:.1f}** |")

    print("\nMemory against queued train stages\n")
    print("| queued | wall s | peak PSS, GB (driver + Ray) | most processes |\n|---:|---:|---:|---:|")
    first_seed = 100  # each row trains seeds of its own: none is a cache hit
    for queued in args.queued:
        seeds = list(range(first_seed, first_seed + queued))
        first_seed += queued
        seconds, peak, most = nmt_run(config_for(args.root, seeds, args.steps), args.root, "train", env)
        print(f"| {queued} | {seconds:.0f} | {peak / 1e9:.2f} | {most} |", flush=True)


if __name__ == "__main__":
    main()
