"""Every YAML example in docs/ is a config the code accepts: a complete file, included
from the repository (``--8<-- "PATH"``), or a fragment whose first line names the
complete config it goes into, validated merged into it (key by key, models by name):
``# in configs/X.yaml`` is an excerpt, which changes nothing of that config as loaded (so
a page never shows a value the file no longer has); ``# a variant of configs/X.yaml``
changes it; ``# in place of download: in configs/X.yaml`` replaces that section. The
offline corpus directory's checksums are the ones the shipped configs pin."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from pipeline.config import load_config
from tests.helpers import REPO

DOCS = REPO / "docs"
BLOCK = re.compile(r"```yaml\n(.*?)```", re.S)
INCLUDE = re.compile(r'^--8<-- "([^"]+)"\s*$')
BASE = re.compile(r"^# (?:(?P<excerpt>in)|a variant of|in place of (?P<replaced>\w+): in) (?P<path>\S+\.yaml)")


def yaml_examples() -> list[tuple[str, str]]:
    return [(f"{page.name}:{page.read_text()[:match.start()].count(chr(10)) + 1}", match.group(1))
            for page in sorted(DOCS.glob("*.md")) for match in BLOCK.finditer(page.read_text())]


def merged(base: dict, fragment: dict) -> dict:
    """``fragment`` into ``base``: mappings merged key by key, ``models`` by name (a
    model the base lacks is added), anything else replaced."""
    out = dict(base)
    for key, value in fragment.items():
        if key == "models" and isinstance(base.get(key), list):
            models = {model["name"]: model for model in base[key]}
            for model in value:
                models[model["name"]] = merged(models.get(model["name"], {}), model)
            out[key] = list(models.values())
        elif isinstance(value, dict) and isinstance(base.get(key), dict):
            out[key] = merged(base[key], value)
        else:
            out[key] = value
    return out


@pytest.mark.parametrize("where,text", yaml_examples(), ids=[where for where, _ in yaml_examples()])
def test_every_yaml_example_in_the_docs_is_a_config_the_code_accepts(where, text, tmp_path):
    first = text.splitlines()[0]
    if included := INCLUDE.match(first):
        path = REPO / included.group(1)
        assert path.is_file(), f"{where}: includes {path}, which does not exist"
        load_config(path)
        return
    base = BASE.match(first)
    assert base, f"{where}: a fragment must name the config it goes into on its first line ('# in configs/X.yaml')"
    base_path = REPO / base.group("path")
    data = yaml.safe_load(base_path.read_text())
    if base.group("replaced"):
        del data[base.group("replaced")]
    data = merged(data, yaml.safe_load(text))
    config = tmp_path / base_path.name
    config.write_text(yaml.safe_dump(data, sort_keys=False))
    for path in base_path.parent.iterdir():  # files the config names relative to itself
        if path.is_dir() and not (tmp_path / path.name).exists():
            (tmp_path / path.name).symlink_to(path)
    loaded = load_config(config)
    if base.group("excerpt"):
        as_shipped = load_config(base_path).model_dump(exclude={"artifact_root", "mirrors"})
        assert loaded.model_dump(exclude={"artifact_root", "mirrors"}) == as_shipped, \
            f"{where}: not what {base.group('path')} holds (a page showing a change says '# a variant of')"


def test_the_offline_corpus_directory_lists_the_sums_the_configs_pin():
    page = (DOCS / "running.md").read_text()
    listed = dict((name, digest) for digest, name in re.findall(r"^([0-9a-f]{64})  (\S+)$", page, flags=re.M))
    for config in ("smoke.yaml", "multi30k_en_de.yaml"):
        pinned = {Path(source["url"]).name: source["sha256"]
                  for split in ("train", "valid", "test")
                  for side in ("src", "tgt")
                  for source in [yaml.safe_load((REPO / "configs" / config).read_text())["download"][split][side]]}
        assert pinned == listed, config
