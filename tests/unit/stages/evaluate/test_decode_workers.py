"""Decoding batches in worker processes (stages/evaluate/decode_workers.py): the same
translations as one process, in input order, and a dead worker or a missing model is an
error, never a hang."""

from __future__ import annotations

import gzip
import os
import signal
from concurrent.futures.process import BrokenProcessPool

import pytest
import torch

from stages.evaluate.decode_workers import DecodeWorkers
from stages.evaluate.translator import SearchSettings, Translator
from tests.trained_models import train_briefly


@pytest.fixture(scope="module")
def model(tokenized, tmp_path_factory):
    return train_briefly(tokenized, tmp_path_factory.mktemp("model"), "transformer", updates=150)


@pytest.fixture(scope="module")
def lines(multi30k) -> list[str]:
    with gzip.open(multi30k / "test_2016_flickr.en.gz", "rt", encoding="utf-8") as text:
        lines = [next(text).rstrip("\n") for _ in range(40)]
    lines[7] = ""  # a blank line stays a blank line, in its place
    return lines


@pytest.fixture
def one_thread():
    """This process on one thread, as each worker: the same arithmetic to the bit."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def test_workers_translate_as_one_process_does_in_input_order(model, lines, one_thread):
    translator = Translator.from_file(model)
    search = SearchSettings(beam_size=3, nbest=2, max_length_b=30)
    expected = translator.translate(lines, search, batch_size=6)
    done = []
    with DecodeWorkers(model, workers=2) as workers:
        assert len(workers.pids) == 2 and os.getpid() not in workers.pids
        got = translator.translate(lines, search, batch_size=6, on_batch=done.append, workers=workers)
    assert [[(t.text, t.hypothesis) for t in n] for n in got] == [[(t.text, t.hypothesis) for t in n]
                                                                   for n in expected]
    assert got[7][0].text == "" and all(n[0].text for i, n in enumerate(got) if i != 7)
    assert len({n[0].text for n in got}) > 5  # not one output for every line
    assert sum(done) == len(lines) and len(done) == 8  # 7 batches of the 39 lines, then the blank one


def test_a_killed_worker_fails_the_search(model, lines):
    translator = Translator.from_file(model)
    with DecodeWorkers(model, workers=2) as workers:
        os.kill(next(iter(workers.pids)), signal.SIGKILL)
        with pytest.raises(BrokenProcessPool):
            translator.translate(lines, SearchSettings(beam_size=2), batch_size=4, workers=workers)


def test_a_missing_model_is_named_before_any_worker_starts(tmp_path):
    with pytest.raises(FileNotFoundError, match=str(tmp_path / "model.pt")):
        DecodeWorkers(tmp_path / "model.pt", workers=2)
    with pytest.raises(ValueError, match="workers"):
        DecodeWorkers(tmp_path / "model.pt", workers=0)


def test_a_model_a_worker_cannot_load_raises_the_loading_error(model, tmp_path):
    import shutil
    import threading

    broken = shutil.copytree(model, tmp_path / "broken")
    (broken / "model.pt").write_bytes(b"not a checkpoint")
    with pytest.raises(RuntimeError, match="not a model file") as raised:
        DecodeWorkers(broken / "model.pt", workers=2)
    assert not isinstance(raised.value, threading.BrokenBarrierError)
    assert str(broken / "model.pt") in str(raised.value)
