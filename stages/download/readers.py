"""Read each kind of source into (source, target) text pairs.

Text is decoded strictly as UTF-8: a bad byte is an error naming the file and line,
never a silent replacement character in the training data.
"""

from __future__ import annotations

import gzip
import os
import shutil
from itertools import islice, zip_longest
from pathlib import Path
from typing import Iterator

from pipeline.core.artifacts import file_digest
from stages.download.config import HuggingFaceSource, SacrebleuSource
from stages.shared.errors import InputDataError

Pair = tuple[str, str]


def read_lines(path: Path) -> Iterator[str]:
    """Lines of a plain or gzip text file, without their line endings."""
    with open(path, "rb") as probe:
        gzipped = probe.read(2) == b"\x1f\x8b"
    opener = gzip.open if gzipped else open
    number = 0
    try:
        with opener(path, "rb") as handle:
            for number, raw in enumerate(handle, 1):
                try:
                    line = raw.decode("utf-8")
                except UnicodeDecodeError as error:
                    raise InputDataError(
                        f"{path}: line {number}: invalid UTF-8 (byte {raw[error.start]:#04x} at column {error.start + 1})"
                    ) from None
                yield line.rstrip("\r\n")
    except (OSError, EOFError) as error:
        raise InputDataError(f"{path}: cannot read after line {number}: {error}") from None


def line_aligned_pairs(src: Path, tgt: Path) -> Iterator[Pair]:
    return _zip_same_length(read_lines(src), read_lines(tgt), src, tgt, "lines")


def document_pairs(src: Path, tgt: Path) -> Iterator[Pair]:
    """Documents separated by blank lines; each pair holds newline-joined sentences."""
    documents = _zip_same_length(_documents(src), _documents(tgt), src, tgt, "documents")
    return (("\n".join(src_doc), "\n".join(tgt_doc)) for src_doc, tgt_doc in documents)


def _zip_same_length(src_items: Iterator, tgt_items: Iterator, src: Path, tgt: Path, unit: str) -> Iterator:
    """Pairs of items, or an error naming both files and their counts if one runs out first."""
    count = 0
    for src_item, tgt_item in zip_longest(src_items, tgt_items):
        if src_item is None or tgt_item is None:
            src_count = count + (src_item is not None) + sum(1 for _ in src_items)
            tgt_count = count + (tgt_item is not None) + sum(1 for _ in tgt_items)
            raise InputDataError(f"parallel files differ in length: {src} has {src_count} {unit}, "
                                 f"{tgt} has {tgt_count}")
        count += 1
        yield src_item, tgt_item


def _documents(path: Path) -> Iterator[list[str]]:
    document: list[str] = []
    for line in read_lines(path):
        if line.strip():
            document.append(line)
        elif document:
            yield document
            document = []
    if document:
        yield document


def tsv_pairs(path: Path, src_column: int, tgt_column: int) -> Iterator[Pair]:
    needed = max(src_column, tgt_column) + 1
    for number, line in enumerate(read_lines(path), 1):
        columns = line.split("\t")
        if len(columns) < needed:
            raise InputDataError(f"{path}: line {number}: {len(columns)} tab-separated columns, need {needed}")
        yield columns[src_column], columns[tgt_column]


def huggingface_pairs(source: HuggingFaceSource, src_lang: str, tgt_lang: str) -> Iterator[Pair]:
    import datasets  # slow to import; only runs that use the hub pay for it

    location = Path(source.dataset).expanduser()
    try:
        if (location / "dataset_dict.json").is_file() or (location / "state.json").is_file():
            loaded = datasets.load_from_disk(str(location))  # a directory written by save_to_disk
            rows = loaded[source.split] if isinstance(loaded, datasets.DatasetDict) else loaded
        else:
            rows = datasets.load_dataset(source.dataset, source.config, split=source.split,
                                         streaming=source.streaming)
    except Exception as error:  # hub, network and format errors all end here
        raise InputDataError(
            f"huggingface dataset {source.dataset!r} (config {source.config!r}, split {source.split!r}): "
            f"cannot load: {error}"
        ) from None
    for number, row in enumerate(rows):
        if source.src_field is not None:
            try:
                yield row[source.src_field], row[source.tgt_field]
            except KeyError as error:
                raise InputDataError(f"{source.dataset}: row {number} has no field {error}; "
                                     f"fields are {sorted(row)}") from None
        else:
            translation = row.get("translation")
            if not isinstance(translation, dict) or src_lang not in translation or tgt_lang not in translation:
                raise InputDataError(
                    f"{source.dataset}: row {number} has no 'translation' with {src_lang!r} and {tgt_lang!r}; "
                    f"set src_field/tgt_field (fields are {sorted(row)})"
                )
            yield translation[src_lang], translation[tgt_lang]


def sacrebleu_pairs(source: SacrebleuSource, src_lang: str, tgt_lang: str, mirrors: list[str]) -> Iterator[Pair]:
    """A sacreBLEU test set; its raw tarballs are taken from a mirror when one has them."""
    from sacrebleu.dataset import DATASETS

    if source.test_set not in DATASETS:
        raise InputDataError(f"sacrebleu test set {source.test_set!r} is unknown to sacreBLEU")
    dataset = DATASETS[source.test_set]
    langpair = source.langpair or f"{src_lang}-{tgt_lang}"
    if langpair not in dataset.langpairs:
        raise InputDataError(f"sacrebleu test set {source.test_set!r} has no language pair {langpair!r}")
    _seed_sacrebleu_cache_from_mirrors(dataset, mirrors)
    try:
        src_file = dataset.get_source_file(langpair)
        ref_file = dataset.get_reference_files(langpair)[0]
    except (Exception, SystemExit) as error:  # sacreBLEU's downloader calls sys.exit on a bad md5
        names = ", ".join(url.rsplit("/", 1)[-1] for url in dataset.data)
        raise InputDataError(
            f"sacrebleu test set {source.test_set!r}: cannot download ({error}). To run offline, put "
            f"{names} in a mirror directory (NMT_MIRROR or the config's 'mirrors')."
        ) from None
    yield from line_aligned_pairs(Path(src_file), Path(ref_file))


def _seed_sacrebleu_cache_from_mirrors(dataset, mirrors: list[str]) -> None:
    # sacreBLEU keeps raw downloads in its own cache (~/.sacrebleu, or $SACREBLEU) and
    # skips any download already there, unverified; so a mirrored tarball is copied in
    # only when its md5 matches the one sacreBLEU pins.
    # _rawdir / _get_tarball_filename are sacreBLEU internals, stable since 2.2.
    os.makedirs(dataset._rawdir, exist_ok=True)
    checksums = dataset.md5 or [None] * len(dataset.data)
    for url, md5 in zip(dataset.data, checksums):
        target = Path(dataset._rawdir) / dataset._get_tarball_filename(url)
        if target.exists():
            continue
        for mirror in mirrors:
            candidate = Path(mirror) / url.rsplit("/", 1)[-1]
            if candidate.is_file() and (md5 is None or file_digest(candidate, "md5") == md5):
                shutil.copyfile(candidate, target)
                # sacreBLEU extracts right after its own download; do the same here.
                from sacrebleu.utils import extract_tarball

                extract_tarball(str(target), dataset._rawdir)
                break


def limit(pairs: Iterator[Pair], max_pairs: int | None) -> Iterator[Pair]:
    """The first ``max_pairs`` pairs, after which the rest is still read and thrown
    away: ``max_pairs`` limits what is used, not what is checked. Stopping early would
    skip the comparison of both files' line counts, so a line missing in the middle of
    one file would silently misalign every pair after it."""
    if max_pairs is None:
        yield from pairs
        return
    yield from islice(pairs, max_pairs)
    for _ in pairs:  # reads (and checks) to the end
        pass
