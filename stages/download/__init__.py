"""download: fetch each split's source and store it as Parquet pairs.

Output: ``train.parquet``, ``valid.parquet``, ``test.parquet`` with string columns
``src`` and ``tgt``, and ``meta.json`` with the language pair and, per split, the pair
count and alignment (``line``; or ``document``, whose rows are newline-joined
sentences for the clean stage to sentence-align).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Iterator

from pipeline.core.context import DownloadSources, StageContext
from stages.download import readers
from stages.download.config import (
    DownloadConfig,
    FileRef,
    FilesSource,
    HuggingFaceSource,
    SacrebleuSource,
    TsvSource,
)
from stages.download.inputs import input_problems  # noqa: F401  (nmt run's check before Ray)
from stages.download.locate import locate_file
from stages.shared.errors import InputDataError
from stages.shared.pair_files import write_pairs

VERSION = 1
SPLITS = ("train", "valid", "test")
RESOURCES = DownloadSources  # mirrors and the download cache


def run(inputs: dict[str, Path], config: DownloadConfig, output: Path, ctx: StageContext[DownloadSources]) -> dict:
    sources = ctx.resources or DownloadSources()
    meta = {"src_lang": config.src_lang, "tgt_lang": config.tgt_lang, "splits": {}}
    metrics = {}
    for split in SPLITS:
        source = getattr(config, split)
        pairs = readers.limit(_pairs(source, config, sources, ctx.progress), source.max_pairs)
        count = write_pairs(pairs, pairs_file(output, split))
        if count == 0:
            raise InputDataError(f"download.{split}: the source has no sentence pairs ({_describe(source)})")
        alignment = source.alignment if isinstance(source, FilesSource) else "line"
        meta["splits"][split] = {"pairs": count, "alignment": alignment, "source": _describe(source)}
        metrics[f"{split}_pairs"] = count
    (output / "meta.json").write_text(json.dumps(meta, indent=2))
    return metrics


def pairs_file(artifact: Path, split: str) -> Path:
    """A split's pairs (Parquet, columns ``src`` and ``tgt``) in a download artifact."""
    return artifact / f"{split}.parquet"


def read_meta(artifact: Path) -> dict:
    """The language pair and, per split, its pair count, alignment and source."""
    return json.loads((artifact / "meta.json").read_text())


def fingerprint(config: DownloadConfig) -> dict[str, list[int] | str]:
    """For the artifact key: size and mtime of each local input file without a pinned
    sha256, so that editing a local corpus invalidates the download artifact, as `make`
    would."""
    fingerprints: dict[str, list[int] | str] = {}
    for split in SPLITS:
        source = getattr(config, split)
        for ref in (getattr(source, name, None) for name in ("src", "tgt", "file")):
            if isinstance(ref, FileRef) and ref.path is not None and ref.sha256 is None:
                try:
                    stat = Path(ref.path).stat()
                    fingerprints[ref.path] = [stat.st_size, stat.st_mtime_ns]
                except FileNotFoundError:
                    fingerprints[ref.path] = "missing"
    return fingerprints


def _pairs(source, config: DownloadConfig, sources: DownloadSources, progress) -> Iterator[tuple[str, str]]:
    def local(ref):
        return locate_file(ref, sources.mirrors, sources.cache, progress)

    if isinstance(source, FilesSource):
        src, tgt = local(source.src), local(source.tgt)
        if source.alignment == "document":
            return readers.document_pairs(src, tgt)
        return readers.line_aligned_pairs(src, tgt)
    if isinstance(source, TsvSource):
        return readers.tsv_pairs(local(source.file), source.src_column, source.tgt_column)
    if isinstance(source, HuggingFaceSource):
        return readers.huggingface_pairs(source, config.src_lang, config.tgt_lang)
    if isinstance(source, SacrebleuSource):
        return readers.sacrebleu_pairs(source, config.src_lang, config.tgt_lang, sources.mirrors)
    raise TypeError(f"unknown source type {type(source).__name__}")


def _describe(source) -> str:
    if isinstance(source, FilesSource):
        return f"{source.src.url or source.src.path} + {source.tgt.url or source.tgt.path}"
    if isinstance(source, TsvSource):
        return str(source.file.url or source.file.path)
    if isinstance(source, HuggingFaceSource):
        return f"huggingface:{source.dataset}/{source.config or ''}/{source.split}"
    return f"sacrebleu:{source.test_set}"
