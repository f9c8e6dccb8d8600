"""BPE and tokenize on a real Multi30k slice, stages called directly (no Ray)."""

from __future__ import annotations

import json

import datasets
import pyarrow.parquet as pq
import pytest
import sentencepiece as spm

from pipeline.config import BpeConfig, TokenizeConfig
from pipeline.context import StageContext
from stages.bpe import train_bpe
from stages.errors import InputDataError
from stages.tokenize import tokenize_corpus

from conftest import clean_slice


@pytest.fixture(scope="module")
def cleaned(multi30k, tmp_path_factory):
    return clean_slice(multi30k, tmp_path_factory.mktemp("data"), {"train": 2000, "val": 100, "test_2016_flickr": 100})


def _run(stage, inputs, config, output):
    output.mkdir()
    return stage(inputs, config, output, StageContext())


def test_joint_model_encodes_both_languages_and_tags_are_single_pieces(cleaned, tmp_path):
    _run(train_bpe, {"clean": cleaned}, BpeConfig(vocab_size=600, user_symbols=["<sep>"]), tmp_path / "bpe")
    vocab = json.loads((tmp_path / "bpe" / "vocab.json").read_text())
    assert vocab["models"] == {"src": "spm.model", "tgt": "spm.model"}
    assert vocab["language_tags"] == {"en": "__en__", "de": "__de__"}
    processor = spm.SentencePieceProcessor(model_file=str(tmp_path / "bpe" / "spm.model"))
    assert processor.get_piece_size() == 600
    assert [processor.id_to_piece(i) for i in range(4)] == ["<pad>", "<unk>", "<s>", "</s>"]
    for symbol in ("__en__", "__de__", "<sep>"):
        assert processor.piece_to_id(symbol) != processor.unk_id()
        assert symbol in processor.encode(f"Ein Hund {symbol} rennt", out_type=str)
    # Both languages are covered by the shared vocabulary: few unknown pieces in either.
    for word in ("dog", "Hund", "Straße"):
        assert processor.unk_id() not in processor.encode(word)


def test_separate_vocabularies_train_one_model_per_side(cleaned, tmp_path):
    _run(train_bpe, {"clean": cleaned}, BpeConfig(vocab_size=400, joint=False), tmp_path / "bpe")
    src = spm.SentencePieceProcessor(model_file=str(tmp_path / "bpe" / "src.model"))
    tgt = spm.SentencePieceProcessor(model_file=str(tmp_path / "bpe" / "tgt.model"))
    assert src.piece_to_id("▁Hund") == src.unk_id() and tgt.piece_to_id("▁Hund") != tgt.unk_id()


def test_same_config_trains_the_same_model(cleaned, tmp_path):
    config = BpeConfig(vocab_size=500, input_sentence_size=1000)  # sampling on: the seed matters
    _run(train_bpe, {"clean": cleaned}, config, tmp_path / "a")
    _run(train_bpe, {"clean": cleaned}, config, tmp_path / "b")
    # Compare the learned pieces: the file also records its own output path.
    pieces = []
    for name in ("a", "b"):
        processor = spm.SentencePieceProcessor(model_file=str(tmp_path / name / "spm.model"))
        pieces.append([processor.id_to_piece(i) for i in range(processor.get_piece_size())])
    assert pieces[0] == pieces[1]


def test_vocabulary_too_large_for_the_corpus_names_the_key(cleaned, tmp_path):
    with pytest.raises(InputDataError, match="lower bpe.vocab_size"):
        _run(train_bpe, {"clean": cleaned}, BpeConfig(vocab_size=200_000), tmp_path / "bpe")


@pytest.fixture(scope="module")
def bpe(cleaned, tmp_path_factory):
    output = tmp_path_factory.mktemp("bpe")
    train_bpe({"clean": cleaned}, BpeConfig(vocab_size=600), output, StageContext())
    return output


def _rows(directory, split):
    files = sorted(directory.glob(f"{split}-*.arrow"))
    return [row for f in files for row in datasets.Dataset.from_file(str(f))]


def test_shards_are_readable_by_datasets_and_decode_to_the_clean_text(cleaned, bpe, tmp_path):
    _run(tokenize_corpus, {"clean": cleaned, "bpe": bpe}, TokenizeConfig(shards=3), tmp_path / "tok")
    assert len(list((tmp_path / "tok").glob("train-*-of-00003.arrow"))) == 3
    processor = spm.SentencePieceProcessor(model_file=str(tmp_path / "tok" / "spm.model"))
    clean = pq.read_table(cleaned / "train.parquet")
    rows = _rows(tmp_path / "tok", "train")
    assert len(rows) == clean.num_rows
    for row, src, tgt in zip(rows, clean.column("src").to_pylist(), clean.column("tgt").to_pylist()):
        assert row["src_ids"][-1] == processor.eos_id() and row["src_len"] == len(row["src_ids"])
        assert processor.decode(row["src_ids"][:-1]) == src
        assert processor.decode(row["tgt_ids"][:-1]) == tgt


def test_sharding_does_not_change_the_rows_and_the_index_adds_up(cleaned, bpe, tmp_path):
    _run(tokenize_corpus, {"clean": cleaned, "bpe": bpe}, TokenizeConfig(shards=1), tmp_path / "one")
    _run(tokenize_corpus, {"clean": cleaned, "bpe": bpe}, TokenizeConfig(shards=4), tmp_path / "four")
    assert _rows(tmp_path / "one", "train") == _rows(tmp_path / "four", "train")
    index = json.loads((tmp_path / "four" / "index.json").read_text())["splits"]["train"]
    rows = _rows(tmp_path / "four", "train")
    assert index["pairs"] == len(rows) == sum(shard["pairs"] for shard in index["shards"])
    assert index["src_tokens"] == sum(row["src_len"] for row in rows)
    assert index["tgt_tokens"] == sum(shard["tgt_tokens"] for shard in index["shards"])
    assert sum(index["length_histogram"]["src"]) == len(rows)
    assert len(_rows(tmp_path / "four", "valid")) == 100 and len(_rows(tmp_path / "four", "test")) == 100


def test_eos_can_be_left_off(cleaned, bpe, tmp_path):
    _run(tokenize_corpus, {"clean": cleaned, "bpe": bpe}, TokenizeConfig(shards=1, append_eos=False), tmp_path / "t")
    assert all(3 not in row["src_ids"] for row in _rows(tmp_path / "t", "valid"))
