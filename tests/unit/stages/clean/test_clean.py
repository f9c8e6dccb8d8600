"""The clean stage: normalization, each filter rule, alignment, valid/test untouched."""

from __future__ import annotations

import json

import pyarrow.parquet as pq
import pytest

from pipeline.core.context import StageContext
from stages import clean
from stages.clean.align import align_sentences
from stages.clean.config import CleanConfig
from stages.clean.filters import PairFilter
from stages.clean.normalize import normalize_text
from stages.shared.pair_files import write_pairs


def test_nfc_composes_combining_accents():
    assert normalize_text("Cafe\u0301", "NFC") == "Caf\u00e9"
    assert normalize_text("\ufb01ne", "NFKC") == "fine" and normalize_text("\ufb01ne", "NFC") == "\ufb01ne"


def test_control_and_invisible_characters_are_removed():
    assert normalize_text("a\x00b\x07c\u200bd\ufeff") == "a b cd"


def test_odd_whitespace_becomes_single_spaces():
    assert normalize_text("  two\u00a0words\tand\u2009more \u3000 ") == "two words and more"


def test_zero_width_joiner_is_kept():
    assert normalize_text("\u0915\u094d\u200d\u0937") == "\u0915\u094d\u200d\u0937"


def _filter(**overrides):
    return PairFilter(CleanConfig(**overrides), "en", "de")


@pytest.mark.parametrize("src, tgt, rule", [
    ("", "Hallo Welt", "empty"),
    ("Hello world", "", "empty"),
    (" ".join(["w"] * 81), "kurz", "too_long"),
    ("x" * 2001, "kurz", "too_long"),
    ("one", "eins zwei drei vier fünf sechs sieben acht neun zehn", "length_ratio"),
    ("Berlin 2014", "Berlin 2014", "identical"),
])
def test_each_rule_removes_what_it_names(src, tgt, rule):
    pair_filter = _filter(max_words=80)
    assert pair_filter.rule_violated(src, tgt) == rule


def test_duplicates_after_the_first_are_removed_and_counted():
    pair_filter = _filter()
    kept = [pair_filter.keep("A dog.", "Ein Hund.") for _ in range(3)]
    assert kept == [True, False, False]
    assert pair_filter.removed["duplicate"] == 2


def test_rules_can_be_switched_off():
    pair_filter = _filter(drop_duplicates=False, drop_identical=False)
    assert pair_filter.keep("Berlin 2014", "Berlin 2014") and pair_filter.keep("Berlin 2014", "Berlin 2014")


def test_language_id_drops_a_target_in_the_wrong_language():
    pair_filter = _filter(langid=True)
    assert pair_filter.rule_violated("A man is riding a bicycle down the street.",
                                     "A man is riding a bicycle down the street!") == "wrong_language"
    assert pair_filter.rule_violated("A man is riding a bicycle down the street.",
                                     "Ein Mann fährt mit dem Fahrrad die Straße entlang.") is None


def test_gale_church_merges_a_split_sentence_into_a_two_to_one_bead():
    src = ["The cat sat on the mat.", "It was happy and it purred loudly all afternoon long.",
           "Then it slept.", "The end."]
    tgt = ["Die Katze saß auf der Matte.", "Sie war glücklich", "und schnurrte den ganzen Nachmittag laut.",
           "Dann schlief sie.", "Das Ende."]
    assert align_sentences(src, tgt) == [
        (src[0], tgt[0]),
        (src[1], "Sie war glücklich und schnurrte den ganzen Nachmittag laut."),
        (src[2], tgt[3]),
        (src[3], tgt[4]),
    ]


def test_gale_church_pairs_equal_documents_one_to_one():
    src = ["One short line.", "A second, somewhat longer line of text here.", "Third line."]
    tgt = ["Eine kurze Zeile.", "Eine zweite, etwas längere Textzeile hier.", "Dritte Zeile."]
    assert align_sentences(src, tgt) == list(zip(src, tgt))


def test_gale_church_drops_sentences_with_no_counterpart():
    assert align_sentences(["Only on the source side."], []) == []
    assert align_sentences([], ["Nur auf der Zielseite."]) == []


def _download_artifact(directory, splits, alignment="line"):
    directory.mkdir()
    meta = {"src_lang": "en", "tgt_lang": "de", "splits": {}}
    for split, pairs in splits.items():
        write_pairs(iter(pairs), directory / f"{split}.parquet")
        meta["splits"][split] = {"pairs": len(pairs), "alignment": alignment}
    (directory / "meta.json").write_text(json.dumps(meta))
    return directory


def _read(path):
    table = pq.read_table(path)
    return list(zip(table.column("src").to_pylist(), table.column("tgt").to_pylist()))


def test_stage_filters_train_but_only_normalizes_valid_and_test(tmp_path):
    noisy = [("A  dog.", "Ein\u00a0Hund."), ("A dog.", "Ein Hund."), ("", "Leer."), ("Same", "Same")]
    download = _download_artifact(tmp_path / "download", {"train": noisy, "valid": noisy, "test": noisy})
    output = tmp_path / "clean"
    output.mkdir()
    metrics = clean.run({"download": download}, CleanConfig(), output, StageContext())
    assert _read(output / "train.parquet") == [("A dog.", "Ein Hund.")]
    normalized = [("A dog.", "Ein Hund."), ("A dog.", "Ein Hund."), ("", "Leer."), ("Same", "Same")]
    assert _read(output / "valid.parquet") == normalized
    assert _read(output / "test.parquet") == normalized
    assert metrics["removed_duplicate"] == 1 and metrics["removed_empty"] == 1 and metrics["removed_identical"] == 1
    report = json.loads((output / "report.json").read_text())
    assert report["splits"]["train"] == {"pairs_in": 4, "pairs_out": 1}


def test_stage_sentence_aligns_document_aligned_input(tmp_path):
    document = ("The cat sat on the mat.\nThen it slept.", "Die Katze saß auf der Matte.\nDann schlief sie.")
    download = _download_artifact(tmp_path / "download", {s: [document] for s in ("train", "valid", "test")},
                                  alignment="document")
    output = tmp_path / "clean"
    output.mkdir()
    clean.run({"download": download}, CleanConfig(), output, StageContext())
    assert _read(output / "train.parquet") == [("The cat sat on the mat.", "Die Katze saß auf der Matte."),
                                               ("Then it slept.", "Dann schlief sie.")]
