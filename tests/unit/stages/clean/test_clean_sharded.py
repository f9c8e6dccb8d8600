"""The sharded clean of the training split equals one filter over the whole split, in
one process: the same pairs in the same order and the same per-rule counts, for any
slice size, with duplicates that fall in different slices."""

from __future__ import annotations

import gzip
import json

import numpy as np
import pyarrow.parquet as pq
import pytest

from pipeline.core.context import RayTasks, StageContext
from stages import clean
from stages.clean.config import CleanConfig
from stages.clean.filters import PairFilter
from stages.clean.normalize import normalize_text
from stages.clean.train_split import repeated_positions
from stages.shared.pair_files import write_pairs

WRONG_LANGUAGE = ("A man is riding a bicycle down the busy street.", "A man is riding a bicycle down the busy street!")


def noisy_corpus(multi30k, pairs: int = 400) -> list[tuple[str, str]]:
    """Multi30k pairs with every rule's case mixed in, and duplicates near and far apart,
    some equal only after normalization."""
    with gzip.open(multi30k / "train.en.gz", "rt") as en, gzip.open(multi30k / "train.de.gz", "rt") as de:
        corpus = [(next(en).strip(), next(de).strip()) for _ in range(pairs)]
    corpus[3] = ("", "Leer.")
    corpus[10] = ("Same", "Same")
    corpus[17] = (" ".join(["w"] * 300), "kurz")
    corpus[25] = ("one", "eins zwei drei vier fünf sechs sieben acht neun zehn elf")
    corpus[40] = WRONG_LANGUAGE
    corpus[41] = corpus[1]                                    # a repeat in the same slice
    corpus[150] = corpus[2]                                   # a repeat slices later
    corpus[151] = (corpus[5][0].replace(" ", "  "), corpus[5][1] + "\u200b")  # equal once normalized
    corpus[300] = WRONG_LANGUAGE                              # a duplicate that also fails langid
    corpus[399] = corpus[2]                                   # a third copy, in the last slice
    return corpus


def one_process_clean(corpus, config: CleanConfig) -> tuple[list[tuple[str, str]], dict[str, int]]:
    """The rule's definition: one PairFilter over the whole split, in order."""
    pair_filter = PairFilter(config, "en", "de")
    normalized = ((normalize_text(s), normalize_text(t)) for s, t in corpus)
    return [pair for pair in normalized if pair_filter.keep(*pair)], pair_filter.removed


def download_artifact(directory, train):
    directory.mkdir()
    small = [("A dog.", "Ein Hund.")]
    meta = {"src_lang": "en", "tgt_lang": "de", "splits": {}}
    for split, pairs in {"train": train, "valid": small, "test": small}.items():
        write_pairs(iter(pairs), directory / f"{split}.parquet")
        meta["splits"][split] = {"pairs": len(pairs), "alignment": "line"}
    (directory / "meta.json").write_text(json.dumps(meta))
    return directory


def sharded_clean(tmp_path, name, corpus, config, ctx):
    output = tmp_path / name
    output.mkdir()
    metrics = clean.run({"download": download_artifact(tmp_path / f"{name}-download", corpus)}, config, output, ctx)
    table = pq.read_table(output / "train.parquet")
    kept = list(zip(table.column("src").to_pylist(), table.column("tgt").to_pylist()))
    removed = json.loads((output / "report.json").read_text())["train_removed"]
    return kept, removed, metrics, output


@pytest.mark.parametrize("rows_per_task", [7, 64, 10_000])
def test_sharded_clean_equals_one_filter_over_the_whole_split(tmp_path, multi30k, rows_per_task):
    corpus = noisy_corpus(multi30k)
    config = CleanConfig(langid=True, rows_per_task=rows_per_task)
    expected_pairs, expected_removed = one_process_clean(corpus, config)
    kept, removed, metrics, output = sharded_clean(tmp_path, "clean", corpus, config, StageContext())
    assert kept == expected_pairs
    assert removed == expected_removed
    # Every rule fired, so each count is checked against something that happened.
    assert all(count > 0 for count in removed.values()), removed
    assert removed["duplicate"] >= 4  # the four planted, and any Multi30k repeats itself
    assert metrics["train_tasks"] == -(-len(corpus) // rows_per_task)
    assert not (output / "_train_slices").exists()


def test_sharded_clean_on_ray_tasks_equals_the_inline_run(tmp_path, multi30k, local_ray):
    corpus = noisy_corpus(multi30k)
    config = CleanConfig(rows_per_task=50)
    inline = sharded_clean(tmp_path, "inline", corpus, config, StageContext())
    on_ray = sharded_clean(tmp_path, "ray", corpus, config, StageContext(tasks=RayTasks()))
    assert on_ray[0] == inline[0] and on_ray[1] == inline[1]
    assert on_ray[2]["train_tasks"] == 8 and on_ray[2]["train_nodes"] == 1


def test_duplicates_kept_when_switched_off(tmp_path, multi30k):
    corpus = noisy_corpus(multi30k)
    config = CleanConfig(drop_duplicates=False, rows_per_task=30)
    expected_pairs, expected_removed = one_process_clean(corpus, config)
    kept, removed, _, _ = sharded_clean(tmp_path, "clean", corpus, config, StageContext())
    assert kept == expected_pairs and removed == expected_removed and removed["duplicate"] == 0


def test_repeats_are_every_occurrence_after_the_first_across_partitions():
    # Three map slices' worth of one partition: digest 7 at positions 5 (slice 0), 2 (slice 1)
    # and 1 (slice 2); digest 9 once.
    def part(positions, digests):
        return (np.array(positions, np.int64), np.array(digests, np.uint64), np.zeros(len(digests), np.uint64))

    slice1, slice2 = 1 << 32, 2 << 32
    repeats = repeated_positions(part([5, 6], [7, 9]), part([slice1 + 2], [7]), part([slice2 + 1], [7]))
    assert sorted(repeats.tolist()) == [slice1 + 2, slice2 + 1]
