"""evaluate: translate the test split with one trained model and score it with sacreBLEU.

The split is cut into ``shards`` contiguous parts, one parallel task each (a Ray task
with one CPU under the runner); every task loads the model and decodes its part with
beam search and, when ``greedy`` is set, with beam 1. Hypotheses are detokenized with
the model's SentencePiece model and scored against the cleaned references (the test
split is normalized, never filtered) with sacreBLEU's BLEU and chrF.

Each task resolves ``evaluate.precision`` on its own device (``pipeline/core/hardware.py``:
``auto`` is bf16 only where the device runs it natively) and runs as many threads as
CPUs Ray gave it.

Output: ``source.txt`` and ``reference.txt`` (the split as scored), ``hypotheses.txt``
(beam), ``hypotheses.greedy.txt``, ``hypotheses.ctranslate2.txt`` (the same beam search
run by CTranslate2, ``evaluate.ctranslate2``), ``nbest.jsonl`` (the ``nbest`` best per line with
model scores) and ``scores.json``: BLEU and chrF with their signatures, the mean
length-penalized model score, decoding speed, the estimated decoding FLOPs per
sentence of the beam search (``stages/shared/models/flops.py``: the cost to use the model, as
training FLOPs are the cost to make it), the resolved precision and device, and what the
report's translation gate reads (``translation_check.py``): the model's source use on the
validation split and how collapsed its beam outputs are.
Speed is per task (one CPU thread under the runner): sentences and generated tokens
(EOS included) per second of decoding, model loading excluded; CTranslate2's the same,
its export excluded, on the same threads.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

from pipeline.core.context import StageContext
from pipeline.core.records import to_json
from pipeline.core.hardware import HardwareError, detect_device, resolve_precision
from stages.clean import read_split
from stages.shared.errors import InputDataError
from stages.evaluate.artifact import SCORES_FILE, EvalSummary
from stages.evaluate.config import EvaluateStageConfig
from stages.shared.inference.model_file import MODEL_FILES, weights_file
from stages.shared.names import TRAIN, train_stage

# 3: lowercased BLEU (bleu_lc) beside the cased headline; 4: decoding FLOPs per sentence;
# 5: CTranslate2's BLEU and speed (evaluate.ctranslate2), decoder-only decoding FLOPs
# without an output projection over the prompt; 6: CTranslate2 searched with each
# sentence's output limit (max_length_a) and min_length, as ours; 7: source use on the
# validation split and the beam outputs' collapse (translation_check.py); 8: source use
# with its standard error over the sentences (source_use_error), for the gate's margin
VERSION = 8
# Of the model's train artifact, only what translating reads.
READS = {TRAIN: MODEL_FILES}
MLFLOW_FILES = ("*.txt", "nbest.jsonl", "scores.json")


def run(inputs: dict[str, Path], config: EvaluateStageConfig, output: Path, ctx: StageContext) -> dict:
    # Imported here: torch and sacreBLEU load only when a stage runs, not with its config.
    from stages.evaluate.decode import DecodeJob, decode_part
    from stages.evaluate.scores import score_hypotheses
    from stages.shared.output_collapse import collapse

    settings = config.evaluate
    name = train_stage(config.model)
    split = read_split(inputs["clean"], settings.split)
    sources, references = split.column("src").to_pylist(), split.column("tgt").to_pylist()
    if not sources:
        raise InputDataError(f"evaluate {config.model!r}: the cleaned {settings.split} split is empty")
    if not weights_file(inputs[name], settings.weights).is_file():
        raise InputDataError(f"evaluate {config.model!r}: {inputs[name]} has no {settings.weights}.pt "
                             "(evaluate.weights: best needs a train run that validated)")

    size = -(-len(sources) // min(settings.shards, len(sources)))
    valid = read_split(inputs["clean"], "valid")
    # The first task also measures the model's source use (translation_check.py), on its
    # device, where the model is loaded already.
    jobs = [DecodeJob(ctx.fetcher(name, inputs[name]), sources[start:start + size], settings, ctx.progress,
                      f"evaluate {config.model} [{start + 1}-{min(start + size, len(sources))}]",
                      (valid.column("src").to_pylist(), valid.column("tgt").to_pylist()) if start == 0 else None)
            for start in range(0, len(sources), size)]
    started = time.time()
    parts = ctx.parallel_map(decode_part, jobs, gpus=1 if settings.device.startswith("cuda") else 0)
    wall_seconds = time.time() - started
    beam = [line for part in parts for line in part.beam]

    _write_lines(output / "source.txt", sources)
    _write_lines(output / "reference.txt", references)
    _write_lines(output / "hypotheses.txt", [line[0].text for line in beam])
    with (output / "nbest.jsonl").open("w", encoding="utf-8") as handle:
        for index, line in enumerate(beam):
            for rank, translation in enumerate(line):
                hypothesis = translation.hypothesis
                handle.write(json.dumps({"line": index, "rank": rank, "text": translation.text,
                                         "score": hypothesis.score, "log_prob": hypothesis.log_prob,
                                         "tokens": len(hypothesis.tokens) + 1}, ensure_ascii=False) + "\n")

    greedy = translated = None
    if settings.greedy:
        greedy = [line for part in parts for line in part.greedy]
        _write_lines(output / "hypotheses.greedy.txt", [line[0].text for line in greedy])
    skipped = parts[0].ctranslate2_skipped if settings.ctranslate2 is not None else None
    if settings.ctranslate2 is not None and not skipped:
        translated = [line for part in parts for line in part.ctranslate2]
        _write_lines(output / "hypotheses.ctranslate2.txt", [line[0].text for line in translated])
    summary = EvalSummary(
        split=settings.split, sentences=len(sources), beam_size=settings.beam_size,
        length_penalty=settings.length_penalty, decode_wall_seconds=wall_seconds,
        **_hardware_summary([part.hardware for part in parts]),
        beam=score_hypotheses(beam, references, sum(p.beam_seconds for p in parts)),
        decode_flops_per_sentence=sum(part.beam_flops for part in parts) / len(sources),
        **collapse([line[0].text for line in beam]), **parts[0].source_use,
        greedy=None if greedy is None else score_hypotheses(greedy, references, sum(p.greedy_seconds for p in parts)),
        ctranslate2_weights=settings.ctranslate2, ctranslate2_skipped=skipped or None,
        ctranslate2=None if translated is None else score_hypotheses(translated, references,
                                                                     sum(p.ctranslate2_seconds for p in parts)))
    scores = to_json(summary)
    (output / SCORES_FILE).write_text(json.dumps(scores, indent=2, ensure_ascii=False))
    return scores


def preflight(config: EvaluateStageConfig, cpus: int) -> None:
    """Refuse, before anything starts, a precision or device this machine lacks (local runs)."""
    import torch

    settings = config.evaluate
    if settings.device.startswith("cuda") and not torch.cuda.is_available():
        raise HardwareError("evaluate.device: cuda, but this machine has no CUDA GPU that torch can use")
    resolve_precision(settings.precision, detect_device(settings.device), "evaluate.precision")


def _hardware_summary(tasks: list[dict]) -> dict:
    """One value per fact when every task agrees (the usual case), else each task's,
    comma-separated: tasks on a mixed cluster may resolve different precisions."""
    summary = {}
    for key in tasks[0]:
        values = [task[key] for task in tasks]
        summary[key] = values[0] if len(set(values)) == 1 else ", ".join(map(str, values))
    return summary


def _write_lines(path: Path, lines: list[str]) -> None:
    # One line per sentence, whatever a sentence holds: a newline inside would shift every later line.
    path.write_text("".join(line.replace("\n", " ") + "\n" for line in lines), encoding="utf-8")
