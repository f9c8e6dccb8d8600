"""Preemption, measured: SIGTERM during training, the time until the checkpoint of the
update under way is committed, and the updates lost.

The smoke data and the base Transformer of "Attention is all you need" (preset
``base``), one Ray Train worker on every CPU, through ``nmt run --until train`` with
``NMT_TIMELINE`` set, so that the stage marks each update, the checkpoint written on
SIGTERM and the update a later attempt resumed at (pipeline/core/timeline.py). Cases:

- ``worker``: SIGTERM to the Ray Train worker process, once it has made ``--after``
  updates; Ray Train's next attempt resumes in the same ``nmt run``;
- ``driver``: SIGTERM to ``nmt run`` itself, which passes it on to the worker, waits
  for its checkpoint and exits; ``nmt run`` is then started again and resumes.

Updates lost: the last update the worker marked before it stopped, minus the update
the next attempt resumed at (0: nothing trained was lost). The checkpoint time: from
the signal to the mark the worker leaves once the checkpoint is handed to Ray Train,
which has then persisted it to the run's storage.

    python benchmarks/orchestration/preemption.py --root /tmp/preempt
    python benchmarks/orchestration/preemption.py --root /tmp/preempt --cases worker --after 3 6
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import yaml

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from pipeline.driver_sigterm import training_workers_below  # noqa: E402

SMOKE = REPO / "configs" / "smoke.yaml"
STAGE = "train/transformer_base"


def config_for(root: Path, steps: int) -> Path:
    raw = yaml.safe_load(SMOKE.read_text())
    raw["models"] = [{"name": "transformer_base", "family": "transformer", "preset": "base"}]
    raw["train"].update(cpus_per_worker=os.cpu_count(), max_steps=steps, warmup_steps=4, valid_every=1000,
                        valid_bleu_every=None, checkpoint_every=1000, log_every=1)
    path = root / "preemption.yaml"
    path.write_text(yaml.safe_dump(raw, sort_keys=False))
    return path


def marks(timeline: Path) -> list[tuple[str, float]]:
    if not timeline.is_file():
        return []
    entries = [json.loads(line) for line in timeline.read_text().splitlines() if line.strip()]
    return [(entry["event"], entry["time"]) for entry in entries if entry["stage"] == STAGE]


def updates(events: list[tuple[str, float]]) -> list[int]:
    return [int(event.split()[1]) for event, _ in events if event.startswith("update ")]


def start(config: Path, root: Path, env: dict) -> subprocess.Popen:
    log = open(root / "nmt-run.log", "ab")
    return subprocess.Popen([sys.executable, "-m", "pipeline", "run", str(config), "--until", "train",
                             "--artifact-root", str(root / "artifacts")], cwd=root, env=env, stdout=log,
                            stderr=subprocess.STDOUT, start_new_session=True)


def train_worker(driver: subprocess.Popen) -> psutil.Process:
    deadline = time.time() + 600
    while time.time() < deadline:
        found = training_workers_below(driver.pid)
        if found:
            return found[0]
        time.sleep(0.1)
    raise SystemExit("no Ray Train worker appeared")


def wait_for(condition, timeout: float, what: str) -> None:
    deadline = time.time() + timeout
    while not condition():
        if time.time() > deadline:
            raise SystemExit(f"timed out waiting for {what}")
        time.sleep(0.05)


def case(kind: str, after: int, root: Path, steps: int, env: dict) -> dict:
    work = root / f"{kind}-{after}"
    work.mkdir(parents=True, exist_ok=True)
    timeline = work / "timeline.jsonl"
    timeline.unlink(missing_ok=True)
    env = {**env, "NMT_TIMELINE": str(timeline), "MLFLOW_TRACKING_URI": f"sqlite:///{work / 'mlflow.db'}"}
    config = config_for(work, steps)
    driver = start(config, work, env)
    worker = train_worker(driver)
    wait_for(lambda: max(updates(marks(timeline)), default=0) >= after, 900, f"update {after}")
    at_signal = max(updates(marks(timeline)))
    signalled = time.time()
    (worker if kind == "worker" else psutil.Process(driver.pid)).send_signal(signal.SIGTERM)
    wait_for(lambda: any(event == "preemption checkpointed" for event, _ in marks(timeline)), 300,
             "the checkpoint written on SIGTERM")
    checkpointed = next(t for event, t in marks(timeline) if event == "preemption checkpointed")
    stopped = max(updates([(e, t) for e, t in marks(timeline) if t <= checkpointed]))
    driver_status = None
    if kind == "driver":
        driver_status = driver.wait(timeout=300)
        driver = start(config, work, env)  # the next `nmt run`: resumes from the store
    wait_for(lambda: any(event.startswith("resumed at update") for event, _ in marks(timeline)), 900,
             "the next attempt")
    resumed = int(next(event for event, _ in marks(timeline) if event.startswith("resumed at update")).split()[-1])
    status = driver.wait(timeout=1800)
    return {"case": f"SIGTERM to the {'Ray Train worker' if kind == 'worker' else 'driver (nmt run)'}",
            "signal at update": at_signal, "checkpointed update": stopped, "resumed at update": resumed,
            "updates lost": stopped - resumed, "SIGTERM to checkpoint, s": checkpointed - signalled,
            "first nmt run exit": driver_status if kind == "driver" else "-",
            "run completed": "yes" if status == 0 else f"no ({status})"}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--root", type=Path, required=True, help="a scratch directory")
    parser.add_argument("--cases", nargs="*", default=["worker", "driver"], choices=["worker", "driver"])
    parser.add_argument("--after", type=int, nargs="*", default=[3], help="updates made before the signal")
    parser.add_argument("--steps", type=int, default=12, help="updates of the run")
    args = parser.parse_args()
    args.root.mkdir(parents=True, exist_ok=True)
    mirror = os.environ.get("NMT_MIRROR") or str(Path(os.environ.get("NMT_CORPORA") or REPO / "corpora")
                                                 / "multi30k")
    env = {**os.environ, "NMT_MIRROR": mirror,
           "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}
    env.pop("RAY_ADDRESS", None)
    rows = [case(kind, after, args.root, args.steps, env) for kind in args.cases for after in args.after]
    print(f"\nPreemption of the base Transformer's train stage, {os.cpu_count()} CPUs\n")
    print("| " + " | ".join(rows[0]) + " |")
    print("|---|" + "---:|" * (len(rows[0]) - 1))
    for row in rows:
        print("| " + " | ".join(f"{value:.1f}" if isinstance(value, float) else str(value) for value in row.values())
              + " |")


if __name__ == "__main__":
    main()
