"""The corpus size the README and docs state ("the corpus files (about 1.3 MB)") is the
size of the files the Multi30k configs pin: read off the real corpus, which the unit
tests, hermetic, never touch."""

from __future__ import annotations

import re

from pipeline.config import load_config
from tests.helpers import REPO


def test_the_corpus_size_the_docs_state_is_the_pinned_files(multi30k):
    download = load_config(REPO / "configs" / "multi30k_en_de.yaml").download
    pinned = [source.url.rsplit("/", 1)[-1] for split in ("train", "valid", "test")
              for source in (getattr(download, split).src, getattr(download, split).tgt)]
    megabytes = sum((multi30k / name).stat().st_size for name in pinned) / 1e6  # sha256-checked: these files
    pages = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
    stated = [(page.name, float(found)) for page in pages
              for found in re.findall(r"corpus files \(about (\d+(?:\.\d+)?) MB\)", page.read_text())]
    assert stated and all(value == round(megabytes, 1) for _, value in stated), (megabytes, stated)
