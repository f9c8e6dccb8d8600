from __future__ import annotations

import gzip
import hashlib
import os
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[1]
# The shared corpus sits beside the checkout (../shared/corpora/multi30k); CI clones
# the repository with shared/ beside it too. NMT_CORPORA points elsewhere if needed.
CORPORA = Path(os.environ.get("NMT_CORPORA", REPO.parent / "shared" / "corpora"))
MULTI30K = CORPORA / "multi30k"


@pytest.fixture(scope="session")
def multi30k() -> Path:
    """The shared corpus. Absent, the tests that need it skip with the reason, except in
    CI (CI=true), where a missing corpus must fail rather than pass by skipping."""
    if not (MULTI30K / "train.en.gz").is_file():
        reason = f"Multi30k not found at {MULTI30K}; set NMT_CORPORA to the directory holding multi30k/"
        if os.environ.get("CI", "").lower() in ("true", "1"):
            pytest.fail(reason)
        pytest.skip(reason)
    return MULTI30K


@pytest.fixture(autouse=True)
def isolated_cache(tmp_path, monkeypatch):
    """Downloads and remote-artifact caches go to the test's own directory."""
    monkeypatch.setenv("NMT_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("NMT_MIRROR", raising=False)


@pytest.fixture(autouse=True)
def fast_retries(monkeypatch):
    """Download retries keep their count but not their seconds of backoff."""
    monkeypatch.setattr("stages.download.http.RETRY_BACKOFF_S", 0.01)


@pytest.fixture(scope="session")
def local_ray():
    """One real local Ray instance for the whole session (starting one takes seconds)."""
    import ray

    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield
    ray.shutdown()


def sha256_of(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def write_lines(path: Path, lines: list[str], gz: bool = False) -> Path:
    data = "".join(line + "\n" for line in lines).encode("utf-8")
    path.write_bytes(gzip.compress(data) if gz else data)
    return path


def slice_multi30k(multi30k: Path, directory: Path, lines: dict[str, int]) -> Path:
    """Copy the first N lines of each Multi30k split (en and de) as plain text."""
    directory.mkdir(parents=True, exist_ok=True)
    for split, count in lines.items():
        for lang in ("en", "de"):
            with gzip.open(multi30k / f"{split}.{lang}.gz", "rt", encoding="utf-8") as handle:
                head = [next(handle).rstrip("\n") for _ in range(count)]
            write_lines(directory / f"{split}.{lang}", head)
    return directory


def files_source(directory: Path, split: str) -> dict:
    return {"type": "files", "src": {"path": str(directory / f"{split}.en")},
            "tgt": {"path": str(directory / f"{split}.de")}}


def write_config(path: Path, data: dict) -> Path:
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def small_config(corpus_dir: Path, **sections) -> dict:
    """A config over a Multi30k slice made by slice_multi30k, with tiny BPE."""
    config = {
        "name": "test",
        "download": {"src_lang": "en", "tgt_lang": "de",
                     "train": files_source(corpus_dir, "train"),
                     "valid": files_source(corpus_dir, "val"),
                     "test": files_source(corpus_dir, "test_2016_flickr")},
        "bpe": {"vocab_size": 500},
        "tokenize": {"shards": 2},
    }
    for name, values in sections.items():
        config[name] = {**config.get(name, {}), **values}
    return config


def clean_slice(multi30k: Path, root: Path, lines: dict[str, int]) -> Path:
    """Download and clean stages, called directly, on a slice of Multi30k: the clean artifact."""
    from pipeline.config import CleanConfig, DownloadConfig
    from pipeline.context import StageContext
    from stages.clean import clean_corpus
    from stages.download import download_corpus

    corpus = slice_multi30k(multi30k, root / "corpus", lines)
    config = DownloadConfig.model_validate({"src_lang": "en", "tgt_lang": "de",
                                            "train": files_source(corpus, "train"),
                                            "valid": files_source(corpus, "val"),
                                            "test": files_source(corpus, "test_2016_flickr")})
    (root / "download").mkdir()
    download_corpus({}, config, root / "download", StageContext())
    (root / "clean").mkdir()
    clean_corpus({"download": root / "download"}, CleanConfig(), root / "clean", StageContext())
    return root / "clean"


@pytest.fixture(scope="session")
def tokenized(multi30k, tmp_path_factory) -> Path:
    """A tokenize artifact of a Multi30k slice (1,500 training pairs, joint 500-piece BPE)."""
    from pipeline.config import BpeConfig, TokenizeConfig
    from pipeline.context import StageContext
    from stages.bpe import train_bpe
    from stages.tokenize import tokenize_corpus

    root = tmp_path_factory.mktemp("tokenized")
    clean = clean_slice(multi30k, root, {"train": 1500, "val": 100, "test_2016_flickr": 100})
    (root / "bpe").mkdir()
    train_bpe({"clean": clean}, BpeConfig(vocab_size=500), root / "bpe", StageContext())
    (root / "tokenize").mkdir()
    tokenize_corpus({"clean": clean, "bpe": root / "bpe"}, TokenizeConfig(shards=2), root / "tokenize",
                    StageContext())
    return root / "tokenize"
