"""The local input files of a download section, checked in a moment before anything
starts: each exists and can be read, and its first lines parse (UTF-8; a TSV's columns).
``nmt run`` calls it before Ray and MLflow start, so that a wrong path or a bad first
line costs a second, not the start of a cluster; ``nmt status`` lists what it finds.
URLs are not fetched here: the download stage verifies them by sha256.

The whole file is still read and checked by the download stage (every line, and the
two sides' lengths); this finds the mistakes a user makes first."""

from __future__ import annotations

import itertools
from pathlib import Path

from stages.download.config import DownloadConfig, FileRef, FilesSource, TsvSource
from stages.download.readers import read_lines, tsv_pairs
from stages.shared.errors import InputDataError

# Lines of each file parsed up front.
FIRST_LINES = 5


def input_problems(download: DownloadConfig) -> list[str]:
    """One message per local input file that is missing, unreadable, or whose first lines
    do not parse, each naming the split, the file and (for a parse error) the line."""
    problems = []
    for split in ("train", "valid", "test"):
        source = getattr(download, split)
        files: list[tuple[str, FileRef]] = []
        if isinstance(source, FilesSource):
            files = [("src", source.src), ("tgt", source.tgt)]
        elif isinstance(source, TsvSource):
            files = [("file", source.file)]
        for side, ref in files:
            if ref.path is None:
                continue  # a URL: fetched and verified by its sha256 when the stage runs
            problem = _problem(Path(ref.path), source if isinstance(source, TsvSource) and ref.member is None else None,
                               parse=ref.member is None)
            if problem:
                problems.append(f"download.{split}.{side}: {problem}")
    return problems


def _problem(path: Path, tsv: TsvSource | None, parse: bool) -> str | None:
    if not path.exists():
        return f"{path}: input file not found"
    if not path.is_file():
        return f"{path}: not a file"
    try:
        with open(path, "rb"):
            pass
    except OSError as error:
        return f"{path}: cannot be read: {error.strerror or error}"
    if not parse:  # an archive: its member is found when the stage extracts it
        return None
    lines = tsv_pairs(path, tsv.src_column, tsv.tgt_column) if tsv else read_lines(path)
    try:
        for _ in itertools.islice(lines, FIRST_LINES):
            pass
    except InputDataError as error:
        return str(error)
    finally:
        lines.close()  # closes the file it holds open
    return None
