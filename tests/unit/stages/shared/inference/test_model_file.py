"""A weights file is checked before it is loaded: against the manifest of the train
artifact beside it, which must list it, and for NaN or infinite weights."""

from __future__ import annotations

import json

import pytest
import torch

from stages.shared.inference.model_file import ModelFileError, load_model_file
from tests.trained_models import train_briefly, write_manifest

pytestmark = pytest.mark.trains  # trains a model


@pytest.fixture
def model_dir(tokenized, tmp_path):
    return train_briefly(tokenized, tmp_path / "model", "transformer", updates=1)  # with its manifest


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
    data = torch.load(path, weights_only=True)
    name = next(iter(data["state_dict"]))  # tied to others: they share its storage
    data["state_dict"][name][0] = float("nan")
    torch.save(data, path)
    write_manifest(model_dir)  # as a diverged run's artifact would record it
    with pytest.raises(ModelFileError, match=rf"weight tensor\(s\) hold NaN or infinite values \({name}"):
        load_model_file(path)


@pytest.mark.parametrize("manifest, said", [
    (None, r"no MANIFEST\.json beside it"),
    ("{not json", r"cannot be read as a manifest"),
    (json.dumps({"files": {"vocab.json": {"sha256": "0" * 64}}}), r"does not list it with a sha256"),
    (json.dumps(["model.pt"]), r"does not list it with a sha256"),
])
def test_a_missing_unreadable_or_non_listing_manifest_is_refused_not_skipped(model_dir, manifest, said):
    """A flipped model.pt beside such a manifest loaded and translated, exit 0."""
    path = model_dir / "model.pt"
    raw = bytearray(path.read_bytes())
    raw[len(raw) // 2] ^= 0x01
    path.write_bytes(bytes(raw))
    if manifest is None:
        (model_dir / "MANIFEST.json").unlink()
    else:
        (model_dir / "MANIFEST.json").write_text(manifest)
    with pytest.raises(ModelFileError, match=said) as refused:
        load_model_file(path)
    assert "nmt verify" in str(refused.value)


def test_an_edited_sentencepiece_model_or_vocabulary_is_refused_naming_the_file(model_dir):
    """Three pieces renamed in spm.model translated a wrong sentence with rc 0: every
    file of a model is checked against the manifest, not the weights alone."""
    import sentencepiece as spm
    from sentencepiece import sentencepiece_model_pb2 as model_pb2

    from stages.shared.inference.model_file import ModelFiles

    files = ModelFiles.find(model_dir)  # as committed: found and checked
    proto = model_pb2.ModelProto()
    proto.ParseFromString(files.src_spm.read_bytes())
    for piece in proto.pieces[10:13]:
        piece.piece = piece.piece + "x"
    files.src_spm.write_bytes(proto.SerializeToString())
    assert spm.SentencePieceProcessor(model_file=str(files.src_spm)).get_piece_size() > 0  # it still loads
    with pytest.raises(ModelFileError, match=rf"{files.src_spm.name}: its sha256 does not match .*MANIFEST\.json"):
        ModelFiles.find(model_dir)
    vocab = model_dir / "vocab.json"
    write_manifest(model_dir)  # the edited model recorded: now the vocabulary is the changed file
    vocab.write_text(vocab.read_text().replace('"unk": 1', '"unk": 3'))
    with pytest.raises(ModelFileError, match=r"vocab\.json: its sha256 does not match"):
        ModelFiles.find(model_dir)
