"""``nmt translate``: lines of text through a trained model, one output line per input line."""

from __future__ import annotations

import contextlib
import functools
import os
import sys
import time
from pathlib import Path

import torch
import typer
from pydantic import ValidationError
from tqdm import tqdm

from pipeline import run_settings
from pipeline.commands.console import console
from pipeline.commands.output import fail, load_experiment, open_store
from pipeline.core.artifacts import ArtifactState
from pipeline.core.hardware import HardwareError, detect_device, resolve_precision
from pipeline.graph import find_stage
from pipeline.selection import plan_experiment
from stages.shared.inference.attention import format_alignment, hard_alignment, sentence_attention
from stages.shared.inference.attention_figures import write_heatmaps, write_page
from stages.shared.inference.decode_pool import DecodePool
from stages.shared.inference.model_file import MODEL_FILES, weights_file
from stages.shared.inference.search import SearchSettings
from stages.shared.inference.translator import Translator, open_translator
from stages.shared.names import train_stage


def translate_text(model: Path, model_name: str | None, input_file: Path | None, search: SearchSettings,
                   batch_size: int, artifact_root: str | None, alignment: bool = False, workers: int = 1,
                   overrides: list[str] = ()) -> None:
    """Translate the lines of ``input_file`` (stdin if None) to stdout, searching as ``search`` says."""
    if alignment and search.nbest > 1:
        fail("--alignment prints the best translation's alignment: use it with --nbest 1", 2)
    if workers > 1 and not search.device.startswith("cpu"):
        fail(f"--workers {workers}: decoding in several processes is for CPUs; on {search.device} use one", 2)
    cores = len(os.sched_getaffinity(0))
    if workers > cores:  # more processes than cores only share them, each with its own model in memory
        console.print(f"--workers {workers}: this machine gives this process {cores} cores; decoding in {cores}",
                      style="yellow")
        workers = cores
    path, translator = _load(model, model_name, artifact_root, search, overrides)
    # Each process gets an equal share of the threads this process would have used.
    pool = (DecodePool(functools.partial(open_translator, path, search.device, translator.precision), workers,
                       max(1, torch.get_num_threads() // workers))
            if workers > 1 else contextlib.nullcontext())
    lines = _input_lines(input_file)
    for number, ids in enumerate(translator.encode(lines), 1):
        _check_length(translator, len(ids), f"{input_file or 'stdin'}: line {number}", "split the line")
    started = time.time()
    # Chunks of many batches: output streams out while the rest translates, in input order.
    chunk = batch_size * 16
    with pool as decode_pool, tqdm(total=len(lines), unit="sent", desc="translate", disable=None,
                                   file=sys.stderr) as bar:
        for start in range(0, len(lines), chunk):
            results = translator.translate(lines[start:start + chunk], search, batch_size, bar.update, decode_pool)
            for index, translations in enumerate(results, start):
                if alignment:
                    print(f"{translations[0].text} ||| {_alignment(translator, lines[index], translations[0])}")
                elif search.nbest == 1:
                    print(translations[0].text)
                else:
                    for translation in translations:
                        print(f"{index} ||| {translation.text} ||| {translation.hypothesis.score:.4f}")
            sys.stdout.flush()
    seconds = time.time() - started
    count = f"{len(lines):,} line{'' if len(lines) == 1 else 's'}"
    console.print(f"{count} in {seconds:.1f}s ({len(lines) / max(seconds, 1e-9):.1f} sentences/s)")


def search_settings(**options) -> SearchSettings:
    """The CLI's search options as ``SearchSettings``, checked once, here: an invalid one
    exits naming its CLI option (``--length-penalty``), not the field."""
    try:
        return SearchSettings(**options)
    except ValidationError as error:
        fail("; ".join(f"--{'-'.join(map(str, e['loc'])).replace('_', '-')}: {e['msg']}" if e["loc"]
                       else e["msg"].removeprefix("Value error, ")
                       for e in error.errors()), 2)


def _load(model: Path, model_name: str | None, artifact_root: str | None, search, overrides: list[str]):
    """(model file, Translator in the resolved precision); a clear exit if either fails."""
    try:
        resolved = resolve_precision(search.precision, detect_device(search.device), "--precision")
        path = model_file(model, model_name, artifact_root, overrides)
        return path, Translator.from_file(path, search.device, resolved)
    except typer.Exit:
        raise  # fail() said why already; typer.Exit is a RuntimeError too
    except (FileNotFoundError, RuntimeError, HardwareError) as error:
        fail(str(error), 2)


def _input_lines(input_file: Path | None) -> list[str]:
    """The input's lines, decoded strictly: a byte that is not UTF-8 exits naming the
    file (or stdin) and the line, never a replacement character or a traceback."""
    raw = input_file.read_bytes() if input_file else sys.stdin.buffer.read()
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as error:
        line = raw[:error.start].count(b"\n") + 1
        fail(f"{input_file or 'stdin'}: line {line}: invalid UTF-8 (byte {raw[error.start]:#04x})", 2)
    # Lines end at "\n" only: str.splitlines would also split at U+2028 and friends
    # inside a sentence, and the output would no longer line up with the input.
    return [line.removesuffix("\r") for line in text.removesuffix("\n").split("\n")] if text else []


# A model without a position table (the RNN) reads any length, but a line of thousands
# of tokens is no sentence and decodes for minutes (5,543 tokens: still decoding after
# 200 s on 2 cores): it is bounded as the other families' 1,024 positions bound them.
POSITIONS_OF_A_MODEL_WITHOUT = 1024


def _check_length(translator, tokens: int, where: str, remedy: str) -> None:
    """Exits, in one line naming ``where``, if a source of ``tokens`` tokens is longer
    than the model's positions can read (a source, its language tags and one output
    token): the model could not translate it."""
    positions = translator.positions or POSITIONS_OF_A_MODEL_WITHOUT
    why = f"its {positions} positions" if translator.positions else "the bound for models without positions"
    limit = positions - 3  # the longest source that output_room leaves one token
    if tokens > limit:
        fail(f"{where} is {tokens} tokens long; this model reads at most {limit} ({why}): {remedy}", 2)


def _alignment(translator, line: str, translation) -> str:
    """The hard word alignment of ``translation``, from the model's cross-attention."""
    if not line.strip():
        return ""
    return format_alignment(hard_alignment(sentence_attention(translator, line, translation=translation)))


def attention_files(model: Path, model_name: str | None, text: str, output: Path, beam: int, device: str,
                    artifact_root: str | None, overrides: list[str] = ()) -> None:
    """``nmt attention``: translate ``text``, write a PNG per layer and head and one HTML page."""
    if not text.strip():
        fail("--input: give a sentence to translate", 2)
    try:
        path = model_file(model, model_name, artifact_root, overrides)
        translator = Translator.from_file(path, device, "fp32")  # weights as trained: no autocast
    except typer.Exit:
        raise  # fail() said why already
    except (FileNotFoundError, RuntimeError) as error:
        fail(str(error), 2)
    (ids,) = translator.encode([text])
    _check_length(translator, len(ids), "--input", "give a shorter sentence")
    sentence = sentence_attention(translator, text, SearchSettings(beam_size=beam))
    pngs = write_heatmaps(sentence, output)
    write_page(sentence, output / "index.html", text, model_name or str(model))
    console.print(f"translation: {sentence.translation.text}")
    console.print(f"alignment (source word - target word): {format_alignment(hard_alignment(sentence))}")
    console.print(f"{len(pngs)} heatmaps and {output / 'index.html'}")


def model_file(model: Path, model_name: str | None, artifact_root: str | None, overrides: list[str] = ()) -> Path:
    """The model file that a translate argument names."""
    if model.suffix not in (".yaml", ".yml"):
        return model  # a file or a train artifact directory: Translator takes either
    return TrainedModel(*trained_artifact(model, model_name, artifact_root, overrides))()


def trained_artifact(config_file: Path, model_name: str | None, artifact_root: str | None,
                     overrides: list[str] = ()):
    """(store, stage name, key) of the train artifact of ``model_name`` in an experiment
    YAML with ``overrides``; without any, where the config as written has no such model
    trained, the ``--set`` of the last ``nmt run`` of the experiment in this store
    (pipeline/run_settings.py). A clear exit if there is no such model or it is not
    trained yet."""
    experiment = load_experiment(config_file, list(overrides))
    store = open_store(experiment, artifact_root)
    found = _trained(experiment, store, model_name)
    last = [] if overrides else run_settings.recorded(store, experiment.name)
    if found is None and last:
        found = _trained(load_experiment(config_file, last), store, model_name)
        if found is not None:
            console.print(f"{model_name}: as the last nmt run of {config_file} trained it, with "
                          + " ".join(f"--set {override}" for override in last), style="dim", highlight=False)
    if found is not None:
        return store, *found
    names = [spec.name for spec in experiment.trained_models()]
    settings = " ".join(f"--set {override}" for override in overrides)
    if model_name not in names:
        fail(f"{config_file}{' with ' + settings if settings else ''}: pick a model with --model: "
             f"{', '.join(names)}", 2)
    fail(f"{config_file}: {model_name} is not trained yet (nmt run {config_file}{' ' + settings if settings else ''} "
         "first)", 1)


def _trained(experiment, store, model_name: str | None) -> tuple[str, str] | None:
    """(stage name, key) of ``model_name``'s trained artifact under ``experiment``; None
    if the experiment has no such model or it is not trained."""
    if model_name not in [spec.name for spec in experiment.trained_models()]:
        return None
    trained = find_stage(plan_experiment(experiment, store), train_stage(model_name))
    return (trained.stage.name, trained.key) if trained.status.state == ArtifactState.CACHED else None


class TrainedModel:
    """A train artifact's model file, fetched from the store onto the node that calls it
    (a service replica may run on another node than the command)."""

    def __init__(self, store, stage: str, key: str):
        self.store, self.stage, self.key = store, stage, key

    def __call__(self) -> Path:
        return weights_file(self.store.local_path(self.stage, self.key, MODEL_FILES))
