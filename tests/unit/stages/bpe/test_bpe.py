"""The bpe stage on a real Multi30k slice, called directly (no Ray)."""

from __future__ import annotations

import json

import pytest
import sentencepiece as spm

from stages import bpe
from stages.bpe.config import BpeConfig
from stages.shared.errors import InputDataError
from tests.helpers import run_stage


def test_joint_model_encodes_both_languages_and_tags_are_single_pieces(cleaned, tmp_path):
    run_stage(bpe.run, {"clean": cleaned}, BpeConfig(vocab_size=600, user_symbols=["<sep>"]), tmp_path / "bpe")
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
    run_stage(bpe.run, {"clean": cleaned}, BpeConfig(vocab_size=400, joint=False), tmp_path / "bpe")
    src = spm.SentencePieceProcessor(model_file=str(tmp_path / "bpe" / "src.model"))
    tgt = spm.SentencePieceProcessor(model_file=str(tmp_path / "bpe" / "tgt.model"))
    assert src.piece_to_id("▁Hund") == src.unk_id() and tgt.piece_to_id("▁Hund") != tgt.unk_id()


def test_same_config_trains_the_same_model(cleaned, tmp_path):
    config = BpeConfig(vocab_size=500, input_sentence_size=1000)  # sampling on: the seed matters
    run_stage(bpe.run, {"clean": cleaned}, config, tmp_path / "a")
    run_stage(bpe.run, {"clean": cleaned}, config, tmp_path / "b")
    # The same bytes, though each run trained in its own temporary and output directory.
    assert (tmp_path / "a" / "spm.model").read_bytes() == (tmp_path / "b" / "spm.model").read_bytes()
    processor = spm.SentencePieceProcessor(model_file=str(tmp_path / "a" / "spm.model"))
    assert processor.get_piece_size() == 500 and str(tmp_path) not in str(processor.serialized_model_proto())


def test_vocabulary_too_large_for_the_corpus_names_the_key(cleaned, tmp_path):
    with pytest.raises(InputDataError, match="lower bpe.vocab_size"):
        run_stage(bpe.run, {"clean": cleaned}, BpeConfig(vocab_size=200_000), tmp_path / "bpe")


def _clean_pairs(cleaned):
    import pyarrow.parquet as pq

    table = pq.read_table(cleaned / "train.parquet")
    return table.column("src").to_pylist(), table.column("tgt").to_pylist()


def test_a_corpus_below_the_sample_size_is_used_whole_in_order(cleaned, tmp_path):
    src, tgt = _clean_pairs(cleaned)
    written = bpe.write_sample(cleaned / "train.parquet", ("src", "tgt"), 10 * len(src), 1, tmp_path / "all.txt")
    assert written == 2 * len(src)
    assert (tmp_path / "all.txt").read_text(encoding="utf-8").splitlines() == src + tgt


def test_a_bigger_corpus_is_sampled_to_the_bound_reproducibly(cleaned, tmp_path):
    src, tgt = _clean_pairs(cleaned)
    size = len(src) // 3

    def sample(seed, name):
        bpe.write_sample(cleaned / "train.parquet", ("src", "tgt"), size, seed, tmp_path / name)
        return (tmp_path / name).read_text(encoding="utf-8").splitlines()

    first, again, other = sample(1, "a.txt"), sample(1, "b.txt"), sample(2, "c.txt")
    assert len(first) == size and first == again and first != other
    # Drawn from both sides, in file order: source lines first, then target lines.
    in_src = [line in set(src) for line in first]
    assert any(in_src) and not all(in_src) and in_src == sorted(in_src, reverse=True)
