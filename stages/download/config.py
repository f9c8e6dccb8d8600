"""The download stage's config: the three splits, each from one source (local files,
a pinned URL, a TSV, a Hugging Face dataset or a sacreBLEU test set)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated, Literal, Union

from pydantic import Field, ValidationInfo, field_validator, model_validator

from pipeline.core.section import Section, resolve_path


class FileRef(Section):
    """One input file: a local path, or a URL pinned by sha256.

    ``member`` selects one file inside an archive (tar, tar.gz, zip) at that path/URL.
    """

    path: str | None = None  # a local file, relative to the config file
    url: str | None = None  # an http(s) URL; needs its sha256
    sha256: str | None = None  # the file's digest, checked after every download or mirror lookup
    member: str | None = None  # a file inside the tar, tar.gz or zip archive at path or url

    @field_validator("path")
    @classmethod
    def _resolve_against_config_dir(cls, value: str | None, info: ValidationInfo) -> str | None:
        return None if value is None else resolve_path(value, info)

    @field_validator("sha256")
    @classmethod
    def _is_hex_digest(cls, value: str | None) -> str | None:
        if value is not None and (len(value) != 64 or any(c not in "0123456789abcdef" for c in value)):
            raise ValueError("must be a 64-character lowercase hex sha256 digest")
        return value

    @model_validator(mode="after")
    def _one_location(self) -> FileRef:
        if (self.path is None) == (self.url is None):
            raise ValueError("give exactly one of 'path' or 'url'")
        if self.url is not None and self.sha256 is None:
            raise ValueError("a 'url' needs its 'sha256' so the download can be verified")
        return self

    @property
    def filename(self) -> str:
        """The name mirrors are searched for: the last component of the URL or path."""
        location = self.url if self.url is not None else self.path
        return location.rstrip("/").rsplit("/", 1)[-1]


class FilesSource(Section):
    """Two files, source and target language, one sentence per line (plain or gzip).

    ``alignment: document`` means blank lines separate documents and sentences inside
    a document are not yet paired; the clean stage sentence-aligns them (Gale-Church).
    """

    type: Literal["files"]  # this kind of source
    src: FileRef  # the source-language side
    tgt: FileRef  # the target-language side
    # line: line N of one file is the translation of line N of the other; document:
    # blank lines separate documents, sentences inside are aligned by the clean stage.
    alignment: Literal["line", "document"] = "line"
    max_pairs: int | None = Field(default=None, gt=0)  # the first N pairs are used; all are read and checked


class TsvSource(Section):
    """One tab-separated file (plain or gzip) holding both sides."""

    type: Literal["tsv"]  # this kind of source
    file: FileRef  # the tab-separated file, plain or gzip
    src_column: int = Field(default=0, ge=0)  # 0-based column of the source side
    tgt_column: int = Field(default=1, ge=0)  # 0-based column of the target side
    max_pairs: int | None = Field(default=None, gt=0)  # the first N pairs are used; all are read and checked


class HuggingFaceSource(Section):
    """A Hugging Face dataset: a hub id or a local dataset directory.

    Rows are either ``{"translation": {src_lang: ..., tgt_lang: ...}}`` (the WMT layout)
    or flat, with ``src_field`` / ``tgt_field`` naming the columns.
    """

    type: Literal["huggingface"]  # this kind of source
    dataset: str  # a hub id (wmt14) or a local dataset directory
    config: str | None = None  # the dataset's configuration (de-en)
    split: str = "train"  # the dataset's split to read
    streaming: bool = False  # read rows as they arrive instead of downloading the split first
    src_field: str | None = None  # flat rows: the source column (default: the translation dict)
    tgt_field: str | None = None  # flat rows: the target column
    max_pairs: int | None = Field(default=None, gt=0)  # the first N pairs are used; all are read and checked


class SacrebleuSource(Section):
    """A sacreBLEU test set by name, e.g. ``wmt14`` (langpair defaults to src-tgt)."""

    type: Literal["sacrebleu"]  # this kind of source
    test_set: str  # a test set sacreBLEU knows (wmt14, wmt19, ...)
    langpair: str | None = None  # default: src_lang-tgt_lang
    max_pairs: int | None = Field(default=None, gt=0)  # the first N pairs are used; all are read and checked


# Every source type, once: the ``Source`` union and the error messages derive from it.
SOURCE_TYPES = (FilesSource, TsvSource, HuggingFaceSource, SacrebleuSource)
Source = Annotated[Union[SOURCE_TYPES], Field(discriminator="type")]


class DownloadConfig(Section):
    """The language pair and one source per split (files, tsv, huggingface, sacrebleu)."""

    src_lang: str  # the source language's code (en): language tags and the report use it
    tgt_lang: str  # the target language's code (de)
    train: Source  # the training split's source
    valid: Source  # the validation split's source (never filtered)
    test: Source  # the test split's source (never filtered)


def mirrors_from(config_mirrors: list[str]) -> list[str]:
    """Config mirrors first, then NMT_MIRROR (colon-separated), each as an absolute path."""
    from_env = [entry for entry in os.environ.get("NMT_MIRROR", "").split(":") if entry]
    return [str(Path(entry).resolve()) for entry in [*config_mirrors, *from_env]]
