"""The data stages at scale: wall time, pairs/s and peak memory of download, clean, bpe
and tokenize at several corpus sizes, and what that extrapolates to.

    python benchmarks/data/data_scale.py                       # 0.5M, 1M and 5M pairs
    python benchmarks/data/data_scale.py --sizes 500000 1000000 --json out.json

The corpus is made by ``benchmarks/data/large_corpus.py`` from Multi30k (distinct pairs of
joined captions); valid and test are Multi30k's own. Every other setting is the
project default (``clean``: NFC, 1-250 words, ratio 9, duplicates and identical pairs
dropped, no langid; ``bpe``: joint, 8,000 pieces, a sample of at most 2M sentences),
with ``tokenize.shards: 8``.

Each stage runs on its own (``--until`` that stage, the ones before it cached) on a
local Ray instance started by this process, so its peak memory is its own. Memory is
the PSS (shared pages divided among the processes that map them, so Ray's shared
object store is counted once) summed over this driver and every process under it,
which is every Ray process: GCS, raylet, object store, and each worker the stage used;
sampled every 0.5 s. The "Ray, idle" row is that sum before any stage runs.

The extrapolation takes each stage's time per pair at the largest size: times 36M
pairs (WMT14 en-fr) on this machine, and on a 16-node cluster of machines like this
one, where the part a stage spends in its own task (``serial_seconds`` in its
metrics: reading, gathering and writing) stays and the rest (its parallel tasks)
divides by 16. Peak memory is extended along the line through the two largest sizes
(below the BPE sample size the bpe stage's memory still grows; above it, it does not).
Network transfers between nodes are not modelled.

    python benchmarks/data/data_scale.py --from-json out.json  # the tables again, no run
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import threading
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import psutil
import yaml
from rich.console import Console
from rich.table import Table

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "benchmarks"))

from large_corpus import DEFAULT_MULTI30K, write_corpus  # noqa: E402

STAGES = ("download", "clean", "bpe", "tokenize")
WMT14_EN_FR_PAIRS = 36_000_000
CLUSTER_NODES = 16


@dataclass
class StageRow:
    pairs: int
    stage: str
    seconds: float
    serial_seconds: float
    peak_gib: float
    processes: int

    @property
    def pairs_per_second(self) -> float:
        return self.pairs / self.seconds


class PeakMemory:
    """Peak of the PSS summed over this process and all its descendants, sampled in a thread."""

    def __init__(self, interval: float = 0.5):
        self.interval, self.peak, self.processes = interval, 0, set()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample_until_stopped, daemon=True)

    def __enter__(self) -> PeakMemory:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()

    def sample(self) -> int:
        me = psutil.Process()
        total = 0
        for process in [me, *me.children(recursive=True)]:
            try:
                total += process.memory_full_info().pss
                self.processes.add(process.pid)
            except (psutil.NoSuchProcess, psutil.AccessDenied):
                pass
        return total

    def _sample_until_stopped(self) -> None:
        while True:
            self.peak = max(self.peak, self.sample())
            if self._stop.wait(self.interval):
                break


def experiment_yaml(corpus: Path, multi30k: Path) -> dict:
    def files(split: str, src: str, tgt: str) -> dict:
        return {"type": "files", "src": {"path": src}, "tgt": {"path": tgt}}

    return {
        "name": "data_scale",
        "download": {
            "src_lang": "en", "tgt_lang": "de",
            "train": files("train", str(corpus / "train.en"), str(corpus / "train.de")),
            "valid": files("valid", str(multi30k / "val.en.gz"), str(multi30k / "val.de.gz")),
            "test": files("test", str(multi30k / "test_2016_flickr.en.gz"), str(multi30k / "test_2016_flickr.de.gz")),
        },
        "tokenize": {"shards": 8},
    }


def measure_size(pairs: int, work: Path, multi30k: Path) -> list[StageRow]:
    from pipeline.core.artifacts import ArtifactStore
    from pipeline.config import load_config
    from pipeline.graph import plan
    from pipeline.runner import run_pipeline

    corpus = work / f"corpus-{pairs}"
    if not (corpus / "train.de").exists():
        write_corpus(pairs, corpus, multi30k)
    config_path = work / f"data_scale-{pairs}.yaml"
    config_path.write_text(yaml.safe_dump(experiment_yaml(corpus, multi30k)))
    config = load_config(config_path)
    root = work / f"artifacts-{pairs}"
    shutil.rmtree(root, ignore_errors=True)
    store = ArtifactStore(str(root))

    rows = []
    for stage in STAGES:
        planned = plan(config, store, until=stage)
        results = []

        def failed(item, error):
            raise error

        with PeakMemory() as memory:
            run_pipeline(planned, store, [], lambda item, result: results.append(result), failed)
        result = next(r for r in results if r.name == stage and not r.cache_hit)
        rows.append(StageRow(pairs, stage, result.ended - result.started,
                             float(result.metrics.get("serial_seconds", result.ended - result.started)),
                             memory.peak / 2**30, len(memory.processes)))
        print(f"{pairs:>10,} {stage:<9} {rows[-1].seconds:7.1f} s  peak {rows[-1].peak_gib:.2f} GiB", flush=True)
    shutil.rmtree(root, ignore_errors=True)
    return rows


def fit_line(xs: list[float], ys: list[float]) -> tuple[float, float]:
    """Least-squares intercept and slope."""
    n = len(xs)
    mean_x, mean_y = sum(xs) / n, sum(ys) / n
    spread = sum((x - mean_x) ** 2 for x in xs)
    slope = 0.0 if spread == 0 else sum((x - mean_x) * (y - mean_y) for x, y in zip(xs, ys)) / spread
    return mean_y - slope * mean_x, slope


def print_tables(rows: list[StageRow], idle_gib: float, cpus: int) -> None:
    console = Console(width=140)
    table = Table(title=f"Data stages at scale ({cpus} CPUs; Ray, idle: {idle_gib:.2f} GiB PSS)")
    for column in ("pairs", "stage", "seconds", "pairs/s", "µs/pair", "peak memory (GiB)", "processes"):
        table.add_column(column, justify="left" if column == "stage" else "right")
    for size in sorted({row.pairs for row in rows}):
        size_rows = [row for row in rows if row.pairs == size]
        for row in size_rows:
            table.add_row(f"{row.pairs:,}", row.stage, f"{row.seconds:.1f}", f"{row.pairs_per_second:,.0f}",
                          f"{row.seconds / row.pairs * 1e6:.1f}", f"{row.peak_gib:.2f}", str(row.processes))
        total = sum(row.seconds for row in size_rows)
        table.add_row(f"{size:,}", "[b]all four[/b]", f"[b]{total:.1f}[/b]", f"{size / total:,.0f}",
                      f"{total / size * 1e6:.1f}", f"[b]{max(r.peak_gib for r in size_rows):.2f}[/b]", "",
                      end_section=True)
    console.print(table)

    largest = max(row.pairs for row in rows)
    smallest = min(row.pairs for row in rows)
    extrapolation = Table(title=f"Extrapolated from {largest:,} pairs to {WMT14_EN_FR_PAIRS / 1e6:.0f}M "
                                f"(WMT14 en-fr): this machine, and {CLUSTER_NODES} nodes like it")
    for column in ("stage", f"µs/pair at {smallest / 1e6:g}M", f"µs/pair at {largest / 1e6:g}M", "flatness",
                   "36M here", f"36M on {CLUSTER_NODES} nodes", "peak GiB at 36M"):
        extrapolation.add_column(column, justify="left" if column == "stage" else "right")
    here_total = cluster_total = 0.0
    for stage in STAGES:
        stage_rows = sorted((row for row in rows if row.stage == stage), key=lambda row: row.pairs)
        small, large = stage_rows[0], stage_rows[-1]
        per_pair = large.seconds / large.pairs
        serial_per_pair = min(large.serial_seconds, large.seconds) / large.pairs
        here = per_pair * WMT14_EN_FR_PAIRS
        cluster = (serial_per_pair + (per_pair - serial_per_pair) / CLUSTER_NODES) * WMT14_EN_FR_PAIRS
        here_total, cluster_total = here_total + here, cluster_total + cluster
        intercept, slope = fit_line([row.pairs for row in stage_rows[-2:]], [row.peak_gib for row in stage_rows[-2:]])
        extrapolation.add_row(stage, f"{small.seconds / small.pairs * 1e6:.1f}", f"{per_pair * 1e6:.1f}",
                              f"{per_pair / (small.seconds / small.pairs):.2f}x", _minutes(here), _minutes(cluster),
                              f"{intercept + slope * WMT14_EN_FR_PAIRS:.1f}")
    extrapolation.add_row("[b]all four[/b]", "", "", "", f"[b]{_minutes(here_total)}[/b]",
                          f"[b]{_minutes(cluster_total)}[/b]", "")
    console.print(extrapolation)


def _minutes(seconds: float) -> str:
    return f"{seconds / 60:.1f} min"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", type=int, nargs="+", default=[500_000, 1_000_000, 5_000_000])
    parser.add_argument("--work", type=Path, help="where corpora and artifacts go (default: a temp dir)")
    parser.add_argument("--multi30k", type=Path, default=DEFAULT_MULTI30K)
    parser.add_argument("--json", type=Path, help="also write the rows here")
    parser.add_argument("--from-json", type=Path, help="print the tables of an earlier --json, run nothing")
    args = parser.parse_args()
    if args.from_json:
        saved = json.loads(args.from_json.read_text())
        print_tables([StageRow(**row) for row in saved["rows"]], saved["ray_idle_gib"], saved["cpus"])
        return

    import ray

    from pipeline.runner import connect_ray

    work = args.work or Path(tempfile.mkdtemp(prefix="nmt-scale-"))
    work.mkdir(parents=True, exist_ok=True)
    os.environ.setdefault("NMT_CACHE_DIR", str(work / "cache"))
    rows = []
    for size in args.sizes:
        # A fresh Ray instance per size: idle workers keep the heap their last task grew,
        # which would count one size's memory against the next.
        connect_ray(None)
        cpus = int(ray.cluster_resources().get("CPU", 0))
        time.sleep(5)  # let Ray's own processes settle before measuring them idle
        idle_gib = PeakMemory().sample() / 2**30
        rows += measure_size(size, work, args.multi30k)
        ray.shutdown()
    print_tables(rows, idle_gib, cpus)
    if args.json:
        args.json.write_text(json.dumps({"cpus": cpus, "ray_idle_gib": idle_gib,
                                         "rows": [asdict(row) for row in rows]}, indent=2))


if __name__ == "__main__":
    main()
