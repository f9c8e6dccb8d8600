"""The tokenize stage on a real Multi30k slice, called directly (no Ray)."""

from __future__ import annotations

import json

import datasets
import pyarrow.parquet as pq
import pytest
import sentencepiece as spm

from pipeline.core.context import StageContext
from stages import bpe, tokenize
from stages.bpe.config import BpeConfig
from stages.tokenize.config import TokenizeConfig
from tests.helpers import run_stage


@pytest.fixture(scope="module")
def bpe_artifact(cleaned, tmp_path_factory):
    output = tmp_path_factory.mktemp("bpe")
    bpe.run({"clean": cleaned}, BpeConfig(vocab_size=600), output, StageContext())
    return output


def _rows(directory, split):
    files = sorted(directory.glob(f"{split}-*.arrow"))
    return [row for f in files for row in datasets.Dataset.from_file(str(f))]


def test_shards_are_readable_by_datasets_and_decode_to_the_clean_text(cleaned, bpe_artifact, tmp_path):
    run_stage(tokenize.run, {"clean": cleaned, "bpe": bpe_artifact}, TokenizeConfig(shards=3), tmp_path / "tok")
    assert len(list((tmp_path / "tok").glob("train-*-of-00003.arrow"))) == 3
    processor = spm.SentencePieceProcessor(model_file=str(tmp_path / "tok" / "spm.model"))
    clean = pq.read_table(cleaned / "train.parquet")
    rows = _rows(tmp_path / "tok", "train")
    assert len(rows) == clean.num_rows
    for row, src, tgt in zip(rows, clean.column("src").to_pylist(), clean.column("tgt").to_pylist()):
        assert row["src_ids"][-1] == processor.eos_id() and row["src_len"] == len(row["src_ids"])
        assert processor.decode(row["src_ids"][:-1]) == src
        assert processor.decode(row["tgt_ids"][:-1]) == tgt


def test_sharding_does_not_change_the_rows_and_the_index_adds_up(cleaned, bpe_artifact, tmp_path):
    run_stage(tokenize.run, {"clean": cleaned, "bpe": bpe_artifact}, TokenizeConfig(shards=1), tmp_path / "one")
    run_stage(tokenize.run, {"clean": cleaned, "bpe": bpe_artifact}, TokenizeConfig(shards=4), tmp_path / "four")
    assert _rows(tmp_path / "one", "train") == _rows(tmp_path / "four", "train")
    index = json.loads((tmp_path / "four" / "index.json").read_text())["splits"]["train"]
    rows = _rows(tmp_path / "four", "train")
    assert index["pairs"] == len(rows) == sum(shard["pairs"] for shard in index["shards"])
    assert index["src_tokens"] == sum(row["src_len"] for row in rows)
    assert index["tgt_tokens"] == sum(shard["tgt_tokens"] for shard in index["shards"])
    assert sum(index["length_histogram"]["src"]) == len(rows)
    assert len(_rows(tmp_path / "four", "valid")) == 100 and len(_rows(tmp_path / "four", "test")) == 100


def test_eos_can_be_left_off(cleaned, bpe_artifact, tmp_path):
    run_stage(tokenize.run, {"clean": cleaned, "bpe": bpe_artifact}, TokenizeConfig(shards=1, append_eos=False), tmp_path / "t")
    assert all(3 not in row["src_ids"] for row in _rows(tmp_path / "t", "valid"))


def test_every_shard_and_chunk_boundary_decodes_to_the_clean_text(cleaned, bpe_artifact, tmp_path, monkeypatch):
    """Shards of uneven size, each encoded in several chunks (tasks): the rows on both
    sides of every boundary are the clean rows at that place, none lost or repeated."""
    monkeypatch.setattr(tokenize, "CHUNK_ROWS", 64)
    monkeypatch.setattr(tokenize, "IPC_BATCH", 32)
    metrics = run_stage(tokenize.run, {"clean": cleaned, "bpe": bpe_artifact}, TokenizeConfig(shards=7),
                        tmp_path / "tok")
    processor = spm.SentencePieceProcessor(model_file=str(tmp_path / "tok" / "spm.model"))
    clean = pq.read_table(cleaned / "train.parquet")
    src, tgt = clean.column("src").to_pylist(), clean.column("tgt").to_pylist()
    files = tokenize.shard_files(tmp_path / "tok", "train")
    assert len(files) == 7 and metrics["tasks"] > 7 + 2
    offset = 0
    for file in files:
        rows = list(datasets.Dataset.from_file(str(file)))
        assert rows, file
        for position in (0, len(rows) - 1):  # both sides of the boundary
            row = rows[position]
            assert processor.decode(row["src_ids"][:-1]) == src[offset + position]
            assert processor.decode(row["tgt_ids"][:-1]) == tgt[offset + position]
        assert [processor.decode(r["src_ids"][:-1]) for r in rows] == src[offset:offset + len(rows)]
        offset += len(rows)
    assert offset == len(src)
