"""clean: normalize every split, sentence-align document-aligned input, filter train.

The training split is cleaned by parallel tasks over slices of it, on any node, with
duplicates found across all of them (``stages/clean/train_split.py``). Valid and test
are small and cleaned in the stage's own task. They are normalized only, never
filtered: dropping hard test sentences would inflate BLEU and make results
incomparable with published ones.

Output: ``train.parquet``, ``valid.parquet``, ``test.parquet`` (``src``, ``tgt``),
``meta.json`` (language pair, passed on) and ``report.json`` (pairs in and out per
split, pairs removed per rule).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Iterator

import pyarrow as pa
import pyarrow.parquet as pq

import stages.download as download_artifact
from pipeline.core.context import StageContext
from stages.clean.align import align_sentences
from stages.clean.config import CleanConfig
from stages.clean.normalize import normalize_text
from stages.clean.train_split import clean_train_split
from stages.shared.pair_files import write_pairs

VERSION = 1
READ_BATCH = 50_000


def run(inputs: dict[str, Path], config: CleanConfig, output: Path, ctx: StageContext) -> dict:
    download = inputs["download"]
    meta = download_artifact.read_meta(download)
    languages = (meta["src_lang"], meta["tgt_lang"])
    report: dict = {"splits": {}}
    train_meta = meta["splits"]["train"]
    train = clean_train_split(download, train_meta["pairs"], train_meta["alignment"] == "document", config,
                              languages, pairs_file(output, "train"), ctx)
    report["splits"]["train"] = {"pairs_in": train_meta["pairs"], "pairs_out": train.pairs_out}
    for split in ("valid", "test"):
        split_meta = meta["splits"][split]
        pairs = _read_pairs(download_artifact.pairs_file(download, split), split_meta["pairs"], ctx, f"clean {split}")
        if split_meta["alignment"] == "document":
            pairs = _sentence_aligned(pairs)
        pairs = ((normalize_text(s, config.unicode_form), normalize_text(t, config.unicode_form)) for s, t in pairs)
        kept = write_pairs(pairs, pairs_file(output, split))
        report["splits"][split] = {"pairs_in": split_meta["pairs"], "pairs_out": kept}
    report["train_removed"] = train.removed
    (output / "meta.json").write_text(json.dumps({"src_lang": languages[0], "tgt_lang": languages[1]}))
    (output / "report.json").write_text(json.dumps(report, indent=2))
    metrics = {f"{split}_pairs": counts["pairs_out"] for split, counts in report["splits"].items()}
    metrics.update({f"removed_{rule}": count for rule, count in train.removed.items()})
    metrics.update(train_tasks=train.tasks, train_nodes=train.nodes, serial_seconds=train.serial_seconds)
    return metrics


def pairs_file(artifact: Path, split: str) -> Path:
    """A split's cleaned pairs (Parquet, columns ``src`` and ``tgt``) in a clean artifact."""
    return artifact / f"{split}.parquet"


def read_split(artifact: Path, split: str) -> pa.Table:
    """A split's cleaned pairs as one table."""
    return pq.read_table(pairs_file(artifact, split))


def read_languages(artifact: Path) -> tuple[str, str]:
    """The source and target language of a clean artifact."""
    meta = json.loads((artifact / "meta.json").read_text())
    return meta["src_lang"], meta["tgt_lang"]


def _read_pairs(path: Path, total: int, ctx: StageContext, label: str) -> Iterator[tuple[str, str]]:
    bar = ctx.progress(total=total, desc=label, unit="pairs")
    for batch in pq.ParquetFile(path).iter_batches(batch_size=READ_BATCH):
        columns = batch.to_pydict()
        yield from zip(columns["src"], columns["tgt"])
        bar.update(batch.num_rows)
    bar.close()


def _sentence_aligned(documents: Iterator[tuple[str, str]]) -> Iterator[tuple[str, str]]:
    for src_document, tgt_document in documents:
        yield from align_sentences(src_document.split("\n"), tgt_document.split("\n"))
