"""Cleaning the training split as parallel tasks, with duplicates removed across all of them.

1. Map: the split is cut into row ranges of ``rows_per_task`` pairs, one task each, on
   any node. A task reads its rows from the download artifact on its own node,
   sentence-aligns document rows, normalizes, applies the rules that look at one pair
   alone, and returns the survivors. It also returns their digests, split into
   ``PARTITIONS`` by digest value.
2. Reduce: one task per partition takes that partition from every map task (Ray moves
   them from node to node, not through this stage's process) and finds the repeats:
   the pairs whose digest already occurred at an earlier position. Equal pairs have
   equal digests, so they meet in the same partition wherever they were read.
3. Write: this stage's task drops the repeats and writes the survivors in their
   original order, a row group at a time.

The result is exactly ``PairFilter`` run over the whole split in one process: the same
pairs in the same order, and the same per-rule counts. A duplicate that also fails
langid counts as a duplicate, as there. Memory stays bounded: a map task holds its
own rows, and this task holds one slice's survivors at a time. The survivors wait in a
scratch folder inside the stage's output, removed before the stage returns.
"""

from __future__ import annotations

import shutil
import time
from collections import deque
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator

import numpy as np
import pyarrow as pa
import pyarrow.ipc as ipc

import stages.download as download_artifact
from pipeline.core.context import StageContext, node_id
from stages.clean.align import align_sentences
from stages.clean.config import CleanConfig
from stages.clean.filters import RULES, PairFilter, pair_digest
from stages.clean.normalize import normalize_text
from stages.shared.pair_files import read_rows, write_pair_tables

PARTITIONS = 16
SURVIVOR_SCHEMA = pa.schema([("src", pa.string()), ("tgt", pa.string()), ("wrong_language", pa.bool_())])
# A pair's place in the split: its slice's index in the high 32 bits, its position among
# that slice's survivors in the low 32. Sorting by it restores the original order.
POSITION_BITS = 32


@dataclass(frozen=True)
class SliceJob:
    index: int
    start: int
    stop: int
    fetch_download: Callable[[], Path]
    config: CleanConfig
    src_lang: str
    tgt_lang: str
    document_aligned: bool
    partitions: int  # 0 when duplicates are kept


@dataclass
class TrainSplitResult:
    pairs_out: int
    removed: dict[str, int]
    tasks: int  # map tasks
    nodes: int
    serial_seconds: float  # spent in this stage's own task, not waiting for its tasks


def clean_train_split(download: Path, pairs_in: int, document_aligned: bool, config: CleanConfig,
                      languages: tuple[str, str], destination: Path, ctx: StageContext) -> TrainSplitResult:
    started, waited = time.perf_counter(), 0.0
    partitions = PARTITIONS if config.drop_duplicates else 0
    fetch = ctx.fetcher("download", download)
    jobs = [SliceJob(index, start, min(start + config.rows_per_task, pairs_in), fetch, config, *languages,
                     document_aligned, partitions)
            for index, start in enumerate(range(0, pairs_in, config.rows_per_task))]
    scratch = destination.parent / "_train_slices"
    scratch.mkdir()
    removed = dict.fromkeys(RULES, 0)
    nodes = set()
    partition_refs: list[list] = []  # per slice: its ``partitions`` digest partitions, left where they are
    in_flight: deque = deque()
    window = ctx.task_window()
    bar = ctx.progress(total=pairs_in, desc="clean train", unit="pairs")

    def take_oldest() -> None:
        nonlocal waited
        job, survivors_ref, summary_ref = in_flight.popleft()
        wait_started = time.perf_counter()
        survivors, summary = ctx.tasks.result(survivors_ref), ctx.tasks.result(summary_ref)
        waited += time.perf_counter() - wait_started
        (scratch / f"{job.index}.arrow").write_bytes(survivors)
        for rule, count in summary["removed"].items():
            removed[rule] += count
        nodes.add(summary["node"])
        bar.update(job.stop - job.start)

    for job in jobs:
        if len(in_flight) == window:
            take_oldest()
        survivors_ref, summary_ref, *parts = ctx.tasks.submit(clean_slice, job, num_returns=2 + partitions)
        in_flight.append((job, survivors_ref, summary_ref))
        partition_refs.append(parts)
    while in_flight:
        take_oldest()
    bar.close()

    wait_started = time.perf_counter()
    reduce_refs = [ctx.tasks.submit(repeated_positions, *(parts[p] for parts in partition_refs))
                   for p in range(partitions)]
    repeats = np.sort(np.concatenate([ctx.tasks.result(ref) for ref in reduce_refs] or [np.zeros(0, np.int64)]))
    waited += time.perf_counter() - wait_started
    removed["duplicate"] = len(repeats)

    pairs_out = write_pair_tables(_kept(jobs, scratch, repeats, removed), destination)
    shutil.rmtree(scratch)
    return TrainSplitResult(pairs_out, removed, len(jobs), len(nodes), time.perf_counter() - started - waited)


def clean_slice(job: SliceJob) -> tuple:
    """A map task: (survivors as Arrow IPC bytes, summary, *digest partitions)."""
    rows = read_rows(download_artifact.pairs_file(job.fetch_download(), "train"), job.start, job.stop)
    pairs: Iterator[tuple[str, str]] = zip(rows.column("src").to_pylist(), rows.column("tgt").to_pylist())
    if job.document_aligned:
        pairs = (pair for src, tgt in pairs for pair in align_sentences(src.split("\n"), tgt.split("\n")))
    pair_filter = PairFilter(job.config, job.src_lang, job.tgt_lang)
    unicode_form = job.config.unicode_form
    src_out, tgt_out, wrong_language = [], [], []
    for src, tgt in pairs:
        src, tgt = normalize_text(src, unicode_form), normalize_text(tgt, unicode_form)
        rule = pair_filter.local_rule(src, tgt)
        if rule is not None:
            pair_filter.removed[rule] += 1
            continue
        src_out.append(src)
        tgt_out.append(tgt)
        wrong_language.append(pair_filter.wrong_language(src, tgt))
    survivors = pa.table({"src": src_out, "tgt": tgt_out, "wrong_language": wrong_language}, schema=SURVIVOR_SCHEMA)
    sink = pa.BufferOutputStream()
    with ipc.new_file(sink, SURVIVOR_SCHEMA) as writer:
        writer.write_table(survivors)
    summary = {"removed": pair_filter.removed, "node": node_id()}
    return (sink.getvalue().to_pybytes(), summary,
            *_partitioned_digests(job, src_out, tgt_out))


def _partitioned_digests(job: SliceJob, src: list[str], tgt: list[str]) -> list[tuple[np.ndarray, ...]]:
    """(positions, high and low 64 bits of each digest) of the survivors, by partition."""
    if job.partitions == 0:
        return []
    digests = np.frombuffer(b"".join(pair_digest(s, t) for s, t in zip(src, tgt)), dtype="<u8").reshape(-1, 2)
    high, low = digests[:, 0].copy(), digests[:, 1].copy()
    positions = (np.int64(job.index) << POSITION_BITS) | np.arange(len(src), dtype=np.int64)
    partition = high % job.partitions
    return [(positions[partition == p], high[partition == p], low[partition == p]) for p in range(job.partitions)]


def repeated_positions(*parts: tuple[np.ndarray, np.ndarray, np.ndarray]) -> np.ndarray:
    """A reduce task: the positions of every pair whose digest occurs at an earlier position."""
    positions = np.concatenate([part[0] for part in parts])
    high = np.concatenate([part[1] for part in parts])
    low = np.concatenate([part[2] for part in parts])
    order = np.lexsort((positions, low, high))  # by digest, then by position
    high, low, positions = high[order], low[order], positions[order]
    repeat = np.zeros(len(positions), dtype=bool)
    repeat[1:] = (high[1:] == high[:-1]) & (low[1:] == low[:-1])
    return positions[repeat]


def _kept(jobs: list[SliceJob], scratch: Path, repeats: np.ndarray, removed: dict[str, int]) -> Iterator[pa.Table]:
    """Each slice's survivors, in order, without the repeats and the wrong-language pairs."""
    slice_of_repeat = repeats >> POSITION_BITS
    for job in jobs:
        with ipc.open_file(pa.memory_map(str(scratch / f"{job.index}.arrow"))) as reader:
            survivors = reader.read_all()
        keep = np.ones(survivors.num_rows, dtype=bool)
        keep[repeats[slice_of_repeat == job.index] & ((1 << POSITION_BITS) - 1)] = False
        wrong = survivors.column("wrong_language").to_numpy() & keep
        removed["wrong_language"] += int(wrong.sum())
        yield survivors.filter(pa.array(keep & ~wrong))
