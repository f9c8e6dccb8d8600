"""A weights file is checked before it is loaded: against the manifest of the train
artifact beside it, and for NaN or infinite weights."""

from __future__ import annotations

import json

import pytest
import torch

from pipeline.core.artifacts import file_sha256
from stages.shared.inference.model_file import ModelFileError, load_model_file
from tests.trained_models import train_briefly


@pytest.fixture
def model_dir(tokenized, tmp_path):
    directory = train_briefly(tokenized, tmp_path / "model", "transformer", updates=1)
    files = {path.name: {"size": path.stat().st_size, "sha256": file_sha256(path)}
             for path in directory.iterdir()}
    (directory / "MANIFEST.json").write_text(json.dumps({"files": files}))
    return directory


def test_a_file_matching_its_manifest_loads(model_dir):
    model, data = load_model_file(model_dir / "model.pt")
    assert data["spec"]["family"] == "transformer" and not model.training


def test_one_flipped_byte_is_refused_naming_the_file_and_manifest(model_dir):
    path = model_dir / "model.pt"
    raw = bytearray(path.read_bytes())
    raw[len(raw) // 2] ^= 0x01
    path.write_bytes(bytes(raw))
    with pytest.raises(ModelFileError, match=r"model\.pt: its sha256 does not match .*MANIFEST\.json"):
        load_model_file(path)


def test_nan_or_infinite_weights_are_refused_naming_a_tensor(model_dir):
    path = model_dir / "model.pt"
    (model_dir / "MANIFEST.json").unlink()  # a file copied out of its artifact: no hash to check
    data = torch.load(path, weights_only=True)
    name = next(iter(data["state_dict"]))  # tied to others: they share its storage
    data["state_dict"][name][0] = float("nan")
    torch.save(data, path)
    with pytest.raises(ModelFileError, match=rf"weight tensor\(s\) hold NaN or infinite values \({name}"):
        load_model_file(path)
