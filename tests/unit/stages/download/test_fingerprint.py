"""The download stage's fingerprint of local inputs (``stages.download.fingerprint``):
what makes editing a local corpus file change the artifact keys."""

from __future__ import annotations

from pipeline.core.artifacts import ArtifactStore
from pipeline.config import load_config
from pipeline.graph import plan
from tests.helpers import REPO, slice_multi30k, small_config, write_config

SMOKE = REPO / "configs" / "smoke.yaml"
STAGES = ["download", "clean", "bpe", "tokenize"]


def test_editing_a_local_corpus_file_changes_the_download_key(tmp_path, multi30k):
    corpus = slice_multi30k(multi30k, tmp_path / "corpus", {"train": 20, "val": 5, "test_2016_flickr": 5})
    config_path = write_config(tmp_path / "exp.yaml", small_config(corpus))
    store = ArtifactStore(str(tmp_path / "artifacts"))
    before = {item.stage.name: item.key for item in plan(load_config(config_path), store)}
    with open(corpus / "train.de", "a", encoding="utf-8") as handle:
        handle.write("Eine neue Zeile.\n")
    after = {item.stage.name: item.key for item in plan(load_config(config_path), store)}
    assert all(before[name] != after[name] for name in STAGES)  # download and everything downstream
    # Files pinned by sha256 (every URL) are identified by their digest, not by a stat.
    from stages.download import fingerprint as local_file_fingerprints

    assert local_file_fingerprints(load_config(SMOKE).download) == {}
    assert set(local_file_fingerprints(load_config(config_path).download)) == {
        str(corpus / f"{split}.{lang}") for split in ("train", "val", "test_2016_flickr") for lang in ("en", "de")}
