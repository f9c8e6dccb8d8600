"""``nmt translate`` on a model file: several decode processes print what one prints,
and what the CPU cannot run is refused with the option that asked for it."""

from __future__ import annotations

import gzip

import pytest
from typer.testing import CliRunner

from pipeline.cli import app
from tests.trained_models import train_briefly


@pytest.fixture(scope="module")
def transformer(tokenized, tmp_path_factory):
    return train_briefly(tokenized, tmp_path_factory.mktemp("transformer"), "transformer", updates=100)


@pytest.fixture(scope="module")
def rnn(tokenized, tmp_path_factory):
    return train_briefly(tokenized, tmp_path_factory.mktemp("rnn"), "rnn", updates=20)


@pytest.fixture(scope="module")
def sentences(multi30k) -> list[str]:
    with gzip.open(multi30k / "test_2016_flickr.en.gz", "rt", encoding="utf-8") as lines:
        return [next(lines).rstrip("\n") for _ in range(12)]


def test_translate_with_workers_prints_what_one_process_prints(transformer, sentences, tmp_path):
    import torch

    (tmp_path / "input.en").write_text("\n".join(sentences[:6] + [""] + sentences[6:12]) + "\n")
    common = ["translate", str(transformer), "--input",
              str(tmp_path / "input.en"), "--batch-size", "2", "--precision", "fp32", "--nbest", "2"]
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # this process on one thread, as each worker: the same arithmetic to the bit
    try:
        alone = CliRunner().invoke(app, common)
        with_workers = CliRunner().invoke(app, [*common, "--workers", "2"])
    finally:
        torch.set_num_threads(threads)
    assert alone.exit_code == 0 and with_workers.exit_code == 0, with_workers.output
    assert with_workers.stdout == alone.stdout and len(alone.stdout.splitlines()) == 2 * 12 + 1  # a blank: one

    on_gpu = CliRunner().invoke(app, [*common, "--workers", "2", "--device", "cuda"])
    assert on_gpu.exit_code == 2 and "--workers 2" in on_gpu.output


def test_translate_refuses_bf16_on_a_cpu_without_it(rnn, monkeypatch):
    monkeypatch.setenv("NMT_CPU_BF16", "0")
    model_dir = rnn
    refused = CliRunner().invoke(app, ["translate", str(model_dir), "--precision", "bf16"], input="A dog.\n")
    assert refused.exit_code == 2 and "--precision: bf16 is refused on this CPU" in refused.output
    auto = CliRunner().invoke(app, ["translate", str(model_dir)], input="A dog.\n")
    assert auto.exit_code == 0 and len(auto.stdout.splitlines()) == 1


@pytest.mark.parametrize("options, message", [
    (["--beam-size", "2", "--nbest", "3"], "nbest (3) cannot exceed beam_size (2)"),
    (["--device", "tpu"], "--device: String should match pattern"),
    (["--length-penalty", "-1"], "--length-penalty: Input should be greater than or equal to 0"),
    (["--precision", "fp16"], "precision fp16 needs a cuda device"),
])
def test_search_settings_are_checked_as_the_evaluate_config_checks_them(tmp_path, options, message):
    """The CLI's options are a SearchSettings: refused before any model is read."""
    refused = CliRunner().invoke(app, ["translate", str(tmp_path / "no-model.pt"), *options], input="A dog.\n")
    assert refused.exit_code == 2 and message in " ".join(refused.output.split())
