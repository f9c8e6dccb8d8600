"""tokenize: encode the cleaned splits with the BPE model into sharded Arrow files.

Train is cut into ``shards`` contiguous row ranges, one parallel task each (a Ray
task per shard under the runner, so a cluster encodes them on all its nodes). A task
gets its rows and the serialized SentencePiece model as arguments and returns the
Arrow IPC bytes, so it needs no shared filesystem.

Output, per split: ``<split>-<i>-of-<n>.arrow`` (Arrow IPC stream, which
``datasets.Dataset.from_file`` memory-maps) with columns ``src_ids`` and ``tgt_ids``
(list<int32>) and ``src_len`` / ``tgt_len`` (int32); ``index.json`` with the pairs
and tokens per shard and length histograms for the trainer's batching; ``vocab.json``
and the SentencePiece model(s), copied so training and evaluation need only this
artifact.
"""

from __future__ import annotations

import json
import shutil
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import sentencepiece as spm

import stages.clean as clean_artifact
from pipeline.context import StageContext
from stages.bpe import read_vocab
from stages.tokenize.config import TokenizeConfig

VERSION = 1
SCHEMA = pa.schema([
    ("src_ids", pa.list_(pa.int32())),
    ("tgt_ids", pa.list_(pa.int32())),
    ("src_len", pa.int32()),
    ("tgt_len", pa.int32()),
])


@dataclass(frozen=True)
class ShardJob:
    split: str
    index: int
    count: int
    pairs: pa.Table
    src_model: bytes
    tgt_model: bytes
    eos_id: int | None  # appended to both sides when set

    @property
    def filename(self) -> str:
        return f"{self.split}-{self.index:05d}-of-{self.count:05d}.arrow"


@dataclass(frozen=True)
class EncodedShard:
    filename: str
    arrow_bytes: bytes
    src_lengths: np.ndarray
    tgt_lengths: np.ndarray


def run(inputs: dict[str, Path], config: TokenizeConfig, output: Path, ctx: StageContext) -> dict:
    clean, bpe = inputs["clean"], inputs["bpe"]
    vocab = read_vocab(bpe)
    for name in set(vocab["models"].values()):
        shutil.copyfile(bpe / name, output / name)
    shutil.copyfile(bpe / "vocab.json", output / "vocab.json")
    src_model = (bpe / vocab["models"]["src"]).read_bytes()
    tgt_model = (bpe / vocab["models"]["tgt"]).read_bytes()
    eos_id = vocab["special_ids"]["eos"] if config.append_eos else None

    jobs = []
    for split in ("train", "valid", "test"):
        table = clean_artifact.read_split(clean, split)
        count = config.shards if split == "train" else 1
        bounds = np.linspace(0, table.num_rows, count + 1).astype(int)
        jobs += [ShardJob(split, i, count, table.slice(bounds[i], bounds[i + 1] - bounds[i]),
                          src_model, tgt_model, eos_id) for i in range(count)]

    started = time.perf_counter()
    bar = ctx.progress(total=len(jobs), desc="tokenize shards", unit="shards")
    shards = []
    for shard in ctx.parallel_map(encode_shard, jobs):
        (output / shard.filename).write_bytes(shard.arrow_bytes)
        shards.append(shard)
        bar.update(1)
    bar.close()
    seconds = time.perf_counter() - started

    index = {"vocab": vocab, "append_eos": config.append_eos, "splits": {}}
    for split in ("train", "valid", "test"):
        split_shards = [s for s in shards if s.filename.startswith(f"{split}-")]
        index["splits"][split] = _split_index(split_shards, config.histogram_bin_width)
    (output / "index.json").write_text(json.dumps(index, indent=2))
    train_split = index["splits"]["train"]
    return {"train_pairs": train_split["pairs"], "train_src_tokens": train_split["src_tokens"],
            "train_tgt_tokens": train_split["tgt_tokens"], "encode_seconds": seconds,
            "pairs_per_second": sum(len(s.src_lengths) for s in shards) / max(seconds, 1e-9)}


def read_index(artifact: Path) -> dict:
    """``index.json`` of a tokenize artifact: ``vocab`` (bpe's ``vocab.json``),
    ``append_eos``, and per split its ``pairs``, ``src_tokens``, ``tgt_tokens``,
    ``shards`` (``file``, ``pairs`` and tokens of each) and ``length_histogram``."""
    return json.loads((artifact / "index.json").read_text())


def shard_files(artifact: Path, split: str) -> list[Path]:
    """The Arrow IPC files of a split, in order."""
    return [artifact / shard["file"] for shard in read_index(artifact)["splits"][split]["shards"]]


def encode_shard(job: ShardJob) -> EncodedShard:
    src_ids = _encode(job.src_model, job.pairs.column("src").to_pylist(), job.eos_id)
    tgt_ids = _encode(job.tgt_model, job.pairs.column("tgt").to_pylist(), job.eos_id)
    table = pa.Table.from_arrays(
        [src_ids, tgt_ids, src_ids.value_lengths().cast(pa.int32()), tgt_ids.value_lengths().cast(pa.int32())],
        schema=SCHEMA,
    )
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, SCHEMA) as writer:
        writer.write_table(table, max_chunksize=10_000)
    return EncodedShard(job.filename, sink.getvalue().to_pybytes(),
                        table.column("src_len").to_numpy(), table.column("tgt_len").to_numpy())


def _encode(model: bytes, texts: list[str], eos_id: int | None) -> pa.ListArray:
    processor = spm.SentencePieceProcessor(model_proto=model)
    # One thread: each shard is its own task with its own CPU.
    pieces = processor.encode(texts, out_type=int, num_threads=1)
    if eos_id is not None:
        pieces = [ids + [eos_id] for ids in pieces]
    lengths = np.fromiter((len(ids) for ids in pieces), dtype=np.int32, count=len(pieces))
    offsets = np.zeros(len(pieces) + 1, dtype=np.int32)
    np.cumsum(lengths, out=offsets[1:])
    values = np.fromiter((i for ids in pieces for i in ids), dtype=np.int32, count=int(offsets[-1]))
    return pa.ListArray.from_arrays(pa.array(offsets), pa.array(values))


def _split_index(shards: list[EncodedShard], bin_width: int) -> dict:
    src = np.concatenate([s.src_lengths for s in shards]) if shards else np.zeros(0, np.int32)
    tgt = np.concatenate([s.tgt_lengths for s in shards]) if shards else np.zeros(0, np.int32)
    longest = int(max(src.max(initial=0), tgt.max(initial=0)))
    edges = np.arange(0, longest + bin_width + 1, bin_width)
    return {
        "pairs": int(len(src)),
        "src_tokens": int(src.sum()),
        "tgt_tokens": int(tgt.sum()),
        "shards": [{"file": s.filename, "pairs": int(len(s.src_lengths)), "src_tokens": int(s.src_lengths.sum()),
                    "tgt_tokens": int(s.tgt_lengths.sum())} for s in shards],
        "length_histogram": {"bin_width": bin_width,
                             "src": np.histogram(src, edges)[0].tolist(),
                             "tgt": np.histogram(tgt, edges)[0].tolist()},
    }
