"""tokenize: encode the cleaned splits with the BPE model into sharded Arrow files.

Train is cut into ``shards`` contiguous row ranges, each written as one file. The work
is cut finer, into chunks of ``CHUNK_ROWS`` pairs, one parallel task each (a Ray task
under the runner, on any node). A task reads its own rows from the clean artifact on its
node and returns their token ids; this stage's task appends them to their shard's file
in order. At most a few chunks are in flight at once, so memory does not grow with
the corpus, and no split passes through one process as a whole.

Output, per split: ``<split>-<i>-of-<n>.arrow`` (Arrow IPC stream, which
``datasets.Dataset.from_file`` memory-maps) with columns ``src_ids`` and ``tgt_ids``
(list<int32>) and ``src_len`` / ``tgt_len`` (int32), in record batches of
``IPC_BATCH`` rows; ``index.json`` with the pairs and tokens per shard and length
histograms for the trainer's batching; ``vocab.json`` and the SentencePiece model(s),
copied so training and evaluation need only this artifact.
"""

from __future__ import annotations

import functools
import itertools
import json
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np
import pyarrow as pa
import sentencepiece as spm

import stages.clean as clean_artifact
from pipeline.core.context import StageContext, in_order, node_id
from stages.bpe import read_vocab
from stages.shared.pair_files import count_rows, read_rows
from stages.tokenize.config import TokenizeConfig

VERSION = 1
SPLITS = ("train", "valid", "test")
SCHEMA = pa.schema([
    ("src_ids", pa.list_(pa.int32())),
    ("tgt_ids", pa.list_(pa.int32())),
    ("src_len", pa.int32()),
    ("tgt_len", pa.int32()),
])
IPC_BATCH = 10_000
# A multiple of IPC_BATCH, so a shard's record batches do not depend on how it was cut.
CHUNK_ROWS = 5 * IPC_BATCH


@dataclass(frozen=True)
class ChunkJob:
    split: str
    shard: int
    shards: int
    start: int
    stop: int
    fetch_clean: Callable[[], Path]
    src_model: bytes
    tgt_model: bytes
    eos_id: int | None  # appended to both sides when set

    @property
    def filename(self) -> str:
        return f"{self.split}-{self.shard:05d}-of-{self.shards:05d}.arrow"


@dataclass(frozen=True)
class EncodedChunk:
    table: pa.Table
    src_length_counts: np.ndarray  # pairs per token count, np.bincount of src_len
    tgt_length_counts: np.ndarray
    node: str


def run(inputs: dict[str, Path], config: TokenizeConfig, output: Path, ctx: StageContext) -> dict:
    clean, bpe = inputs["clean"], inputs["bpe"]
    vocab = read_vocab(bpe)
    for name in set(vocab["models"].values()):
        shutil.copyfile(bpe / name, output / name)
    shutil.copyfile(bpe / "vocab.json", output / "vocab.json")
    src_model = (bpe / vocab["models"]["src"]).read_bytes()
    tgt_model = (bpe / vocab["models"]["tgt"]).read_bytes()
    eos_id = vocab["special_ids"]["eos"] if config.append_eos else None
    fetch_clean = ctx.fetcher("clean", clean)

    jobs = []
    for split in SPLITS:
        rows = count_rows(clean_artifact.pairs_file(clean, split))
        count = config.shards if split == "train" else 1
        bounds = np.linspace(0, rows, count + 1).astype(int)
        for shard in range(count):
            # An empty shard still gets its (empty) file: one job with no rows.
            starts = range(bounds[shard], bounds[shard + 1], CHUNK_ROWS) or [bounds[shard]]
            jobs += [ChunkJob(split, shard, count, int(start), int(min(start + CHUNK_ROWS, bounds[shard + 1])),
                              fetch_clean, src_model, tgt_model, eos_id) for start in starts]

    started = time.perf_counter()
    bar = ctx.progress(total=sum(job.stop - job.start for job in jobs), desc="tokenize", unit="pairs")
    shards: dict[str, ShardSummary] = {}
    nodes: set[str] = set()
    writer = None
    writing_seconds = 0.0
    for job, chunk in zip(jobs, in_order(ctx.tasks, encode_chunk, jobs, window=ctx.task_window())):
        write_started = time.perf_counter()
        if job.filename not in shards:
            if writer is not None:
                writer.close()
            writer = pa.ipc.new_stream(str(output / job.filename), SCHEMA)
            shards[job.filename] = ShardSummary(job.split, job.filename)
        writer.write_table(chunk.table, max_chunksize=IPC_BATCH)
        shards[job.filename].add(chunk)
        nodes.add(chunk.node)
        writing_seconds += time.perf_counter() - write_started
        bar.update(job.stop - job.start)
    writer.close()
    bar.close()
    seconds = time.perf_counter() - started

    index = {"vocab": vocab, "append_eos": config.append_eos, "splits": {}}
    for split in SPLITS:
        split_shards = [shard for shard in shards.values() if shard.split == split]
        index["splits"][split] = _split_index(split_shards, config.histogram_bin_width)
    (output / "index.json").write_text(json.dumps(index, indent=2))
    train_split = index["splits"]["train"]
    return {"train_pairs": train_split["pairs"], "train_src_tokens": train_split["src_tokens"],
            "train_tgt_tokens": train_split["tgt_tokens"], "encode_seconds": seconds,
            "pairs_per_second": sum(s.pairs for s in shards.values()) / max(seconds, 1e-9),
            "tasks": len(jobs), "nodes": len(nodes), "serial_seconds": writing_seconds}


def read_index(artifact: Path) -> dict:
    """``index.json`` of a tokenize artifact: ``vocab`` (bpe's ``vocab.json``),
    ``append_eos``, and per split its ``pairs``, ``src_tokens``, ``tgt_tokens``,
    ``shards`` (``file``, ``pairs`` and tokens of each) and ``length_histogram``."""
    return json.loads((artifact / "index.json").read_text())


def shard_files(artifact: Path, split: str) -> list[Path]:
    """The Arrow IPC files of a split, in order."""
    return [artifact / shard["file"] for shard in read_index(artifact)["splits"][split]["shards"]]


def encode_chunk(job: ChunkJob) -> EncodedChunk:
    """A task: read rows ``start:stop`` of the split from the clean artifact and encode them."""
    pairs = read_rows(clean_artifact.pairs_file(job.fetch_clean(), job.split), job.start, job.stop)
    src_ids = _encode(job.src_model, pairs.column("src").to_pylist(), job.eos_id)
    tgt_ids = _encode(job.tgt_model, pairs.column("tgt").to_pylist(), job.eos_id)
    src_len, tgt_len = src_ids.value_lengths().cast(pa.int32()), tgt_ids.value_lengths().cast(pa.int32())
    table = pa.Table.from_arrays([src_ids, tgt_ids, src_len, tgt_len], schema=SCHEMA)
    return EncodedChunk(table, np.bincount(src_len.to_numpy()), np.bincount(tgt_len.to_numpy()), node_id())


def _encode(model: bytes, texts: list[str], eos_id: int | None) -> pa.ListArray:
    processor = spm.SentencePieceProcessor(model_proto=model)
    # One thread: each chunk is its own task with its own CPU.
    pieces = processor.encode(texts, out_type=int, num_threads=1)
    if eos_id is not None:
        for ids in pieces:
            ids.append(eos_id)
    lengths = np.fromiter(map(len, pieces), dtype=np.int32, count=len(pieces))
    offsets = np.zeros(len(pieces) + 1, dtype=np.int32)
    np.cumsum(lengths, out=offsets[1:])
    values = np.fromiter(itertools.chain.from_iterable(pieces), dtype=np.int32, count=int(offsets[-1]))
    return pa.ListArray.from_arrays(pa.array(offsets), pa.array(values))


@dataclass
class ShardSummary:
    """What the index says of one shard file, added up chunk by chunk."""

    split: str
    file: str
    pairs: int = 0
    src_tokens: int = 0
    tgt_tokens: int = 0
    src_length_counts: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    tgt_length_counts: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))

    def add(self, chunk: EncodedChunk) -> None:
        self.pairs += chunk.table.num_rows
        self.src_tokens += int(np.dot(chunk.src_length_counts, np.arange(len(chunk.src_length_counts))))
        self.tgt_tokens += int(np.dot(chunk.tgt_length_counts, np.arange(len(chunk.tgt_length_counts))))
        self.src_length_counts = _add_counts(self.src_length_counts, chunk.src_length_counts)
        self.tgt_length_counts = _add_counts(self.tgt_length_counts, chunk.tgt_length_counts)


def _add_counts(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    total = np.zeros(max(len(a), len(b)), np.int64)
    total[:len(a)] += a
    total[:len(b)] += b
    return total


def _split_index(shards: list[ShardSummary], bin_width: int) -> dict:
    src = functools.reduce(_add_counts, [s.src_length_counts for s in shards], np.zeros(0, np.int64))
    tgt = functools.reduce(_add_counts, [s.tgt_length_counts for s in shards], np.zeros(0, np.int64))
    longest = max(len(src), len(tgt), 1) - 1
    edges = np.arange(0, longest + bin_width + 1, bin_width)
    return {
        "pairs": sum(s.pairs for s in shards),
        "src_tokens": sum(s.src_tokens for s in shards),
        "tgt_tokens": sum(s.tgt_tokens for s in shards),
        "shards": [{"file": s.file, "pairs": s.pairs, "src_tokens": s.src_tokens, "tgt_tokens": s.tgt_tokens}
                   for s in shards],
        "length_histogram": {"bin_width": bin_width,
                             "src": _binned(src, edges), "tgt": _binned(tgt, edges)},
    }


def _binned(counts: np.ndarray, edges: np.ndarray) -> list[int]:
    """Pairs per bin [edge, next edge), from pairs per exact length."""
    return [int(counts[low:high].sum()) for low, high in zip(edges[:-1], edges[1:])]
