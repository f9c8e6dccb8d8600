"""A service replica's decode process (pipeline/serving/decode_process.py): it decodes
what the backend decodes in this process, and its death or a model it cannot load
surfaces as an error in the replica, never as a hang."""

import os
import signal

import pytest

from pipeline.serving.backends import SearchOptions, SourceEncoder, open_backend
from pipeline.serving.decode_process import DecodeProcess, DecodeProcessExited
from tests.trained_models import train_briefly

SENTENCES = ["A man is riding a bike.", "Two dogs play in the snow.", "A woman reads a book on a bench."]


@pytest.fixture(scope="module")
def model(tokenized, tmp_path_factory):
    return train_briefly(tokenized, tmp_path_factory.mktemp("model"), "transformer", updates=100)


def test_the_child_decodes_what_the_backend_decodes_in_this_process(model):
    sources = SourceEncoder(model).encode(SENTENCES)
    options = SearchOptions(beam=3, nbest=2)
    decoder = DecodeProcess(model, "ours", "cpu", 1)
    try:
        assert decoder.name == "ours" and decoder.pid != os.getpid()
        assert decoder.translate(sources, options) == open_backend(model, "ours", "cpu", 1).translate(sources, options)
    finally:
        decoder.close()
    assert not decoder.alive()


def test_a_killed_child_fails_the_next_request_with_its_exit_code(model):
    decoder = DecodeProcess(model, "ours", "cpu", 1)
    os.kill(decoder.pid, signal.SIGKILL)
    with pytest.raises(DecodeProcessExited, match=f"pid {decoder.pid}.*code -9"):
        decoder.translate(SourceEncoder(model).encode(SENTENCES[:1]), SearchOptions())
    assert not decoder.alive()


def test_a_model_the_child_cannot_load_raises_its_error_in_the_replica(model, tmp_path):
    broken = tmp_path / "broken"
    broken.mkdir()
    for file in model.iterdir():
        (broken / file.name).write_bytes(file.read_bytes())
    (broken / "model.pt").write_bytes(b"not a checkpoint")
    with pytest.raises(RuntimeError, match=f"decode process failed:\nloading {broken} for the ours backend"):
        DecodeProcess(broken, "ours", "cpu", 1)
