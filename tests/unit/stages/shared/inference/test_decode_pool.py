"""Decoding in processes of their own (stages/shared/inference/decode_pool.py), as ``nmt
translate --workers`` and each service replica do: the same translations as this
process, in input order, and a dead process or a model it cannot load is an error
naming it, never a hang."""

from __future__ import annotations

import functools
import gzip
import os
import shutil
import signal
import time

import pytest
import torch

from stages.shared.inference.decode_pool import DecodeDeadlineExceeded, DecodePool, DecodeProcessExited
from stages.shared.inference.search import SearchSettings
from stages.shared.inference.translator import Translator, open_translator
from tests.trained_models import train_briefly, write_manifest

pytestmark = pytest.mark.trains  # decoding processes, each importing torch


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
    """This process on one thread, as each pool process: the same arithmetic to the bit."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def fp32_translator(model):
    return functools.partial(open_translator, model, "cpu", "fp32")


def test_a_pool_translates_as_one_process_does_in_input_order(model, lines, one_thread):
    translator = Translator.from_file(model)
    search = SearchSettings(beam_size=3, nbest=2, max_length_b=30)
    expected = translator.translate(lines, search, batch_size=6)
    done = []
    with DecodePool(fp32_translator(model), workers=2) as pool:
        assert pool.name == "ours" and len(pool.pids) == 2 and os.getpid() not in pool.pids
        got = translator.translate(lines, search, batch_size=6, on_batch=done.append, pool=pool)
    assert [[(t.text, t.hypothesis) for t in n] for n in got] == [[(t.text, t.hypothesis) for t in n]
                                                                   for n in expected]
    assert got[7][0].text == "" and all(n[0].text for i, n in enumerate(got) if i != 7)
    assert len({n[0].text for n in got}) > 5  # not one output for every line
    assert sum(done) == len(lines) and len(done) == 8  # 7 batches of the 39 lines, then the blank one
    assert not pool.alive()  # closed


def test_a_killed_process_fails_the_next_batch_with_its_pid_and_exit_code(model, lines):
    translator = Translator.from_file(model)
    with DecodePool(fp32_translator(model), workers=1) as pool:
        (pid,) = pool.pids
        os.kill(pid, signal.SIGKILL)
        with pytest.raises(DecodeProcessExited, match=f"pid {pid}.*code -9"):
            translator.translate(lines, SearchSettings(beam_size=2), batch_size=4, pool=pool)
        # Replaced as one stopped at a deadline is: the pool stays alive and decodes again.
        assert pool.alive()
        decoded = translator.translate(lines, SearchSettings(beam_size=2), batch_size=4, pool=pool)
        assert len(decoded) == len(lines) and all(translations[0].text is not None for translations in decoded)
        assert pid not in pool.pids and len(pool.pids) == 1


def test_a_process_that_died_while_idle_is_replaced_before_any_batch_finds_it(model, lines):
    with DecodePool(fp32_translator(model), workers=1) as pool:
        (pid,) = pool.pids
        os.kill(pid, signal.SIGKILL)
        while pool.processes[0].alive():  # until the kill has landed
            time.sleep(0.01)
        pool.replace_exited()  # what the service's health check does
        assert pool.alive() and not pool.ready()  # alive: its replacement is loading
        translator = Translator.from_file(model)
        assert translator.translate(lines[:2], SearchSettings(beam_size=2), batch_size=4, pool=pool)
        assert pool.ready() and pid not in pool.pids


def test_a_model_a_process_cannot_load_raises_the_loading_error(model, tmp_path):
    broken = shutil.copytree(model, tmp_path / "broken")
    (broken / "model.pt").write_bytes(b"not a checkpoint")
    write_manifest(broken)  # committed so: the manifest lists it, and loading it fails
    with pytest.raises(RuntimeError, match="not a model file") as raised:
        DecodePool(fp32_translator(broken / "model.pt"), workers=2)
    assert f"loading the model (open_translator({broken / 'model.pt'}, cpu, fp32))" in str(raised.value)


def test_a_missing_model_is_named_by_the_error(tmp_path):
    with pytest.raises(RuntimeError, match=f"FileNotFoundError: {tmp_path / 'model.pt'}: no model file"):
        DecodePool(fp32_translator(tmp_path / "model.pt"), workers=1)


def test_a_pool_needs_at_least_one_process_of_one_thread(model):
    with pytest.raises(ValueError, match="workers"):
        DecodePool(fp32_translator(model), workers=0)
    with pytest.raises(ValueError, match="threads per worker"):
        DecodePool(fp32_translator(model), workers=1, threads_per_worker=0)


def test_a_batch_past_its_deadline_kills_its_process_and_the_pool_comes_back(model, lines):
    """What keeps one request from holding a service's decoder: the batch fails at its
    deadline, the pool is not ready while a new process loads, then decodes again."""
    translator = Translator.from_file(model)
    sources = translator.encode(lines[:8])
    endless = SearchSettings(beam_size=32, max_length_a=10.0, max_length_b=1024, min_length=1000)
    # At the lowest priority, as a service's bulk lane: its replacement too.
    with DecodePool(fp32_translator(model), workers=1, background=True) as pool:
        (old_pid,) = pool.pids
        with pytest.raises(DecodeDeadlineExceeded, match=f"deadline of 0.5 s.*pid {old_pid}"):
            pool.translate(sources, endless, deadline_s=0.5)
        assert pool.alive() and not pool.ready()  # being replaced: alive, not ready
        found = pool.translate(sources, SearchSettings(beam_size=2), deadline_s=60)  # waits for the new one
        assert len(found) == 8 and pool.ready() and pool.pids != {old_pid}
        assert [os.sched_getscheduler(pid) for pid in pool.pids] == [os.SCHED_IDLE]
