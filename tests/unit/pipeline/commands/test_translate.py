"""``nmt translate`` on a model file: several decode processes print what one prints,
and what the CPU cannot run is refused with the option that asked for it."""

from __future__ import annotations

import gzip

import pytest
from typer.testing import CliRunner

from hypothesis import given, settings
from hypothesis import strategies as st

from pipeline.cli import app
from tests.trained_models import train_briefly

pytestmark = pytest.mark.trains  # translate with worker processes, each importing torch


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
    (["--beam-size", "10000"], "--beam-size: Input should be less than or equal to 64"),
    (["--max-length-a", "1e30"], "--max-length-a: Input should be less than or equal to 10"),
    (["--max-length-a", "nan"], "--max-length-a: Input should be a finite number"),
    (["--min-length", "1000000000"], "--min-length: Input should be less than or equal to 1024"),
])
def test_search_settings_are_checked_as_the_evaluate_config_checks_them(tmp_path, options, message):
    """The CLI's options are a SearchSettings (bounded, finite): refused before any model is read."""
    refused = CliRunner().invoke(app, ["translate", str(tmp_path / "no-model.pt"), *options], input="A dog.\n")
    assert refused.exit_code == 2 and message in " ".join(refused.output.split())


def test_input_that_is_not_utf8_is_one_line_naming_the_line(transformer, tmp_path):
    (tmp_path / "input.en").write_bytes(b"A dog.\nA caf\xe9.\n")
    refused = CliRunner().invoke(app, ["translate", str(transformer), "--input", str(tmp_path / "input.en")])
    assert refused.exit_code == 2 and f"{tmp_path / 'input.en'}: line 2: invalid UTF-8 (byte 0xe9)" in \
        " ".join(refused.output.split())


@pytest.mark.parametrize("family", ["transformer", "rnn"])
def test_a_line_longer_than_the_model_reads_is_named(family, request):
    """The RNN, which has no positions, once decoded a 5,543-token line for minutes."""
    refused = CliRunner().invoke(app, ["translate", str(request.getfixturevalue(family))],
                                 input="A dog.\n" + "word " * 5000 + "\n")
    said = " ".join(refused.output.split())
    assert refused.exit_code == 2 and "stdin: line 2 is" in said and "reads at most 1021" in said, said
    assert "split the line" in said


OPTION_VALUES = {
    "--beam-size": st.integers(-2, 100), "--nbest": st.integers(-1, 70), "--min-length": st.integers(-1, 2000),
    "--max-length-b": st.integers(-1, 2000),
    "--max-length-a": st.one_of(st.floats(allow_nan=True, allow_infinity=True), st.floats(0, 12)),
    "--length-penalty": st.one_of(st.floats(allow_nan=True, allow_infinity=True), st.floats(0, 11)),
}


@settings(max_examples=25, deadline=None)
@given(options=st.sets(st.sampled_from(sorted(OPTION_VALUES)), max_size=4)
       .flatmap(lambda chosen: st.fixed_dictionaries({name: OPTION_VALUES[name] for name in sorted(chosen)})))
def test_any_search_options_translate_or_exit_with_one_error_line(transformer, options):
    """Whatever the search options, nmt translate prints one line per input line or
    exits 2 with an error: line naming an option; never a traceback, never a hang."""
    import time

    arguments = [str(part) for name, value in options.items() for part in (name, value)]
    started = time.monotonic()
    result = CliRunner().invoke(app, ["translate", str(transformer), "--precision", "fp32", *arguments],
                                input="A dog runs.\nTwo men talk.\n")
    assert time.monotonic() - started < 120, options
    if result.exit_code == 0:
        assert len(result.stdout.splitlines()) == 2 * options.get("--nbest", 1), result.output  # N best per line
    else:
        assert result.exit_code == 2 and result.output.startswith("error: "), (options, result.output)
        assert not isinstance(result.exception, Exception) or isinstance(result.exception, SystemExit)


@pytest.mark.parametrize("command", [["translate"], ["attention", "--input", "A dog."]])
def test_a_model_not_trained_yet_is_one_error_line_and_exit_status_1(command, tmp_path):
    """fail() exits through typer.Exit, which is a RuntimeError: it must not be caught and
    reported again as "error: 1" with another exit status."""
    from tests.helpers import REPO

    result = CliRunner().invoke(app, [*command, str(REPO / "configs" / "smoke.yaml"), "--model", "transformer_tiny",
                                      "--artifact-root", str(tmp_path / "empty")], input="A dog.\n")
    errors = [line for line in result.output.splitlines() if line.startswith("error:")]
    assert result.exit_code == 1 and len(errors) == 1, result.output
    assert "transformer_tiny is not trained yet" in errors[0]
