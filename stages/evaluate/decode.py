"""One decoding task of the evaluate stage: load the model, decode a share of the split
with the beam (and greedily, and with the model exported to CTranslate2 when
``evaluate.ctranslate2`` asks), on as many threads as CPUs the task was given; the first
task also measures the model's source use on the validation split, on the same device."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import torch

from pipeline.core.hardware import cpus_of_this_task, detect_device, resolve_precision
from stages.evaluate.config import EvaluateConfig
from stages.shared.translation_check import source_use_on
from stages.shared.export import ExportError
from stages.shared.inference.ctranslate2_translator import CTranslate2Translator
from stages.shared.inference.model_file import weights_file
from stages.shared.inference.translator import Translation, Translator
from stages.shared.models.flops import decoding_flops


@dataclass(frozen=True)
class DecodeJob:
    fetch_model: Callable[[], Path]  # the train artifact, local to the task that calls it
    lines: list[str]
    config: EvaluateConfig
    progress: Callable  # tqdm-like, from the stage's context
    label: str  # for the progress bar
    # The validation split's (sources, references), for the one task that measures the
    # model's source use (translation_check.py); None for the others.
    valid: tuple[list[str], list[str]] | None = None


@dataclass(frozen=True)
class Decoded:
    beam: list[list[Translation]]
    greedy: list[list[Translation]] | None
    beam_seconds: float
    greedy_seconds: float
    hardware: dict  # the task's resolved precision and device
    beam_flops: float  # estimated decoding FLOPs of the beam search over the part (stages/shared/models/flops.py)
    ctranslate2: list[list[Translation]] | None = None  # the beam search run by CTranslate2
    ctranslate2_seconds: float = 0.0
    ctranslate2_skipped: str | None = None  # why a model CTranslate2 cannot run was not decoded by it
    source_use: dict = field(default_factory=dict)  # translation_check.source_use, from the task given the split


def decode_part(job: DecodeJob) -> Decoded:
    """One task's share: load the model, decode with the beam (and greedily)."""
    settings = job.config
    device = detect_device(settings.device)
    precision = resolve_precision(settings.precision, device, "evaluate.precision")
    threads = cpus_of_this_task()
    torch.set_num_threads(threads)
    hardware = {"precision": precision, "device": device.kind, "device_name": device.name,
                "device_capability": device.capability, "threads": threads}
    translator = Translator.from_file(weights_file(job.fetch_model(), settings.weights), settings.device, precision)
    search = settings.search_settings()
    passes = 1 + settings.greedy + (settings.ctranslate2 is not None)
    bar = job.progress(total=len(job.lines) * passes, desc=job.label, unit="sent")
    started = time.perf_counter()
    beam = translator.translate(job.lines, search, settings.batch_size, bar.update)
    beam_seconds = time.perf_counter() - started
    greedy, greedy_seconds = None, 0.0
    if settings.greedy:
        started = time.perf_counter()
        greedy = translator.translate(job.lines, search.model_copy(update={"beam_size": 1, "nbest": 1}),
                                      settings.batch_size, bar.update)
        greedy_seconds = time.perf_counter() - started
    ctranslate2, ctranslate2_seconds, skipped = None, 0.0, None
    if settings.ctranslate2 is not None:
        try:
            engine = CTranslate2Translator(job.fetch_model(), settings.device, threads, settings.ctranslate2)
        except ExportError as error:  # the rnn family: counted as not decoded, not as a failure
            skipped = str(error)
            bar.update(len(job.lines))
        else:
            started = time.perf_counter()
            ctranslate2 = translator.translate(job.lines, search, settings.batch_size, bar.update, engine=engine)
            ctranslate2_seconds = time.perf_counter() - started
    bar.close()
    # The model's FLOPs, at each sentence's source length (as encoded, EOS included) and
    # its best output's length (EOS included): the cost of use beside the cost to train.
    flops = sum(decoding_flops(translator.model, len(source), len(line[0].hypothesis.tokens) + 1,
                               search.beam_size)
                for source, line in zip(translator.encode(job.lines), beam))
    checked = source_use_on(translator, *job.valid) if job.valid is not None else {}
    return Decoded(beam, greedy, beam_seconds, greedy_seconds, hardware, flops, ctranslate2, ctranslate2_seconds,
                   skipped, checked)
