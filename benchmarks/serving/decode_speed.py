"""Decoding speed against the engines people ship with, side by side in one run: the
same trained Transformer, the same sentences, beam 4, batches of 64, at 1 and 2 threads.

- ours: ``Translator``, what the evaluate stage, ``nmt translate`` and ``nmt serve`` use;
- Hugging Face: the model exported as a ``MarianMTModel`` (``nmt export --format
  huggingface``), ``generate(num_beams=4)``; post-LN models only (Marian's layout);
- CTranslate2 float32 and int8: the model exported with ``nmt export --format
  ctranslate2``, ``Translator.translate_batch``;
- at 2 threads and more, ours and CTranslate2 also as "N workers": N batches at a time,
  one thread each (ours: ``DecodePool`` processes; CTranslate2: ``inter_threads``),
  besides one batch at a time on N threads.

Each engine translates the sentences once after a warm-up batch. Tokens/s counts output
SentencePiece tokens (plus EOS) of every engine's text with the same model, so engines
are counted alike. BLEU (sacreBLEU, cased) sits beside the speed: an engine that is
faster because it searches less shows it. Length penalties differ in kind (ours: GNMT's
alpha 0.6; Hugging Face and CTranslate2: length^1), so BLEU may differ a little.

    python benchmarks/serving/decode_speed.py MODEL_DIR --sources src.txt --references ref.txt
    python benchmarks/serving/decode_speed.py --config configs/multi30k_en_de.yaml --model transformer_small
    python benchmarks/serving/decode_speed.py ... --profile   # where our beam search spends a step's time
    python benchmarks/serving/decode_speed.py ... --repeats 5  # median of 5 runs each, for a noisy machine
    python benchmarks/serving/decode_speed.py ... --device cuda --batch-sizes 64 256   # on a GPU: ours in
        # fp32 and bf16, Hugging Face, CTranslate2 float16 and int8_float16
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import multiprocessing
import os
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import sentencepiece as spm
import torch
from sacrebleu.metrics import BLEU

from stages.shared.export import ExportError, export_model
from stages.shared.inference.decode_pool import DecodePool, threads_of_spawned_children
from stages.shared.inference.model_file import ModelFiles
from stages.shared.inference.search import SearchSettings
from stages.shared.inference.translator import Translator, open_translator

BEAM, BATCH, MAX_LENGTH_B = 4, 64, 50


class Ours:
    def __init__(self, model: Path, threads: int, workers: int = 1, device: str = "cpu", precision: str = "fp32",
                 batch: int = BATCH):
        """``workers`` > 1: that many worker processes (``DecodePool``), each with an
        equal share of the threads, decode a batch each at a time."""
        torch.set_num_threads(threads)
        self.name = ("ours" if workers == 1 else f"ours, {workers} workers") + \
            (f" {precision}" if device != "cpu" or precision != "fp32" else "")
        self.translator = Translator.from_file(model, device, precision)
        self.workers = (DecodePool(functools.partial(open_translator, model, device, precision), workers,
                                   threads // workers) if workers > 1 else None)
        self.batch = batch

    def translate(self, lines: list[str]) -> list[str]:
        search = SearchSettings(beam_size=BEAM, max_length_b=MAX_LENGTH_B)
        return [t[0].text for t in self.translator.translate(lines, search, self.batch, pool=self.workers)]


class HuggingFace:
    name = "Hugging Face generate"

    def __init__(self, exported: Path, threads: int, device: str = "cpu", batch: int = BATCH):
        from transformers import AutoTokenizer, MarianMTModel

        torch.set_num_threads(threads)
        self.tokenizer = AutoTokenizer.from_pretrained(exported)
        self.model = MarianMTModel.from_pretrained(exported).eval().to(device)
        self.device, self.batch = device, batch

    def translate(self, lines: list[str]) -> list[str]:
        order = sorted(range(len(lines)), key=lambda i: -len(lines[i]))  # batches of similar length, as ours
        texts: list[str] = [""] * len(lines)
        for start in range(0, len(order), self.batch):
            chunk = order[start:start + self.batch]
            batch = self.tokenizer([lines[i] for i in chunk], return_tensors="pt", padding=True).to(self.device)
            with torch.inference_mode():
                generated = self.model.generate(**batch, num_beams=BEAM, do_sample=False,
                                                max_new_tokens=batch["input_ids"].size(1) + MAX_LENGTH_B)
            for i, text in zip(chunk, self.tokenizer.batch_decode(generated, skip_special_tokens=True)):
                texts[i] = text
        return texts


class CTranslate2:
    def __init__(self, exported: Path, threads: int, quantization: str, model: Path, workers: int = 1,
                 device: str = "cpu", batch: int = BATCH):
        """``workers`` > 1: CTranslate2's ``inter_threads``, each worker with an equal
        share of the threads, a batch each at a time. ``quantization``: its compute type."""
        import ctranslate2

        self.name = f"CTranslate2 {quantization}" + (f", {workers} workers" if workers > 1 else "")
        self.engine = ctranslate2.Translator(str(exported), device=device.split(":")[0], inter_threads=workers,
                                             intra_threads=threads // workers, compute_type=quantization)
        self.batch = batch
        files = ModelFiles.find(model)
        self.src_spm = spm.SentencePieceProcessor(model_file=str(files.src_spm))
        self.tgt_spm = spm.SentencePieceProcessor(model_file=str(files.tgt_spm))

    def translate(self, lines: list[str]) -> list[str]:
        tokens = self.src_spm.encode(lines, out_type=str)
        results = self.engine.translate_batch(tokens, beam_size=BEAM, max_batch_size=self.batch,
                                              max_decoding_length=max(map(len, tokens)) + MAX_LENGTH_B)
        return [self.tgt_spm.decode_pieces(result.hypotheses[0]) for result in results]


@dataclass(frozen=True)
class EngineSpec:
    """What a fresh process needs to build one engine: its kind and the files it runs."""
    kind: str                 # "ours", "huggingface" or "ctranslate2"
    model: Path               # our model file (ours; the SentencePiece models for CTranslate2)
    exported: Path | None = None
    quantization: str = ""    # CTranslate2's compute type; ours: its precision on a GPU
    workers: int = 1          # batches decoded at a time, the threads shared among them
    device: str = "cpu"
    batch: int = BATCH

    def build(self, threads: int):
        if self.kind == "ours":
            return Ours(self.model, threads, self.workers, self.device, self.quantization or "fp32", self.batch)
        if self.kind == "huggingface":
            return HuggingFace(self.exported, threads, self.device, self.batch)
        return CTranslate2(self.exported, threads, self.quantization, self.model, self.workers, self.device,
                           self.batch)

    def with_workers(self, workers: int) -> EngineSpec:
        return dataclasses.replace(self, workers=workers)


def export_engines(model: Path, scratch: Path) -> tuple[list[EngineSpec], list[str]]:
    """Each engine this model can run on, exported once; and why the others are left out."""
    specs, skipped = [EngineSpec("ours", model)], []
    for kind, quantization in (("huggingface", ""), ("ctranslate2", "float32"), ("ctranslate2", "int8")):
        try:
            exported = export_model(model, kind, scratch / f"{kind}-{quantization or 'float32'}",
                                    quantization or None)
        except ExportError as error:
            skipped.append(str(error))
            continue
        specs.append(EngineSpec(kind, model, exported, quantization))
    return specs, skipped


def device_engines(model: Path, scratch: Path, device: str, batch: int) -> tuple[list[EngineSpec], list[str]]:
    """On one device: ours in fp32 and bf16, Hugging Face (post-LN models), and
    CTranslate2 in float16 and int8_float16, all from one export of the same weights
    (CTranslate2 converts to its compute type when it loads)."""
    specs = [EngineSpec("ours", model, quantization=precision, device=device, batch=batch)
             for precision in ("fp32", "bf16")]
    skipped = []
    for kind, compute_types in (("huggingface", [""]), ("ctranslate2", ["float16", "int8_float16"])):
        try:
            exported = export_model(model, kind, scratch / kind, None)
        except ExportError as error:
            skipped.append(str(error))
            continue
        specs += [EngineSpec(kind, model, exported, compute_type, device=device, batch=batch)
                  for compute_type in compute_types]
    return specs, skipped


def device_table(model: Path, lines: list[str], references: list[str], device: str, batch_sizes: list[int]) -> None:
    """Sentences/s and BLEU of every engine on ``device`` at each batch size, each engine
    in a fresh process; an engine that cannot run there (CTranslate2's float16 on a CPU,
    or a build for another CUDA) is a row that says why."""
    tgt_spm = spm.SentencePieceProcessor(model_file=str(ModelFiles.find(model).tgt_spm))
    where = torch.cuda.get_device_name(device) if device.startswith("cuda") else "the CPU"
    print(f"{len(lines)} sentences, beam {BEAM}, on {where}, {model}; "
          "each engine in a fresh process")
    print("\n| engine | batch | sentences/s | tokens/s | BLEU | engine / ours fp32 |")
    print("|---|---:|---:|---:|---:|---:|")
    with tempfile.TemporaryDirectory(prefix="decode-speed-") as scratch:
        for batch in batch_sizes:
            specs, skipped = device_engines(model, Path(scratch) / str(batch), device, batch)
            ours_rate = None
            for spec in specs:
                try:
                    name, seconds, texts = run_alone(measure, 1, spec, 1, lines)
                except Exception as error:  # noqa: BLE001 - a row that says why, then the next engine
                    label = f"{spec.kind} {spec.quantization}".strip()
                    print(f"| {label} | {batch} | failed: {str(error).splitlines()[0][:120]} | | | |", flush=True)
                    continue
                tokens = sum(len(ids) + 1 for ids in tgt_spm.encode(texts))
                rate = len(lines) / seconds
                ours_rate = ours_rate or rate
                bleu = BLEU().corpus_score(texts, [references]).score
                print(f"| {name} | {batch} | {rate:,.1f} | {tokens / seconds:,.0f} | {bleu:.2f} | "
                      f"{rate / ours_rate:.2f}x |", flush=True)
            for reason in skipped:
                print(f"left out: {reason}")


def measure(spec: EngineSpec, threads: int, lines: list[str]) -> tuple[str, float, list[str]]:
    """(engine name, seconds, translations): one warm-up batch, then every line, timed.
    Runs in a process of its own (see ``run_alone``)."""
    engine = spec.build(threads)
    engine.translate(lines[:spec.batch * spec.workers])  # a batch for each worker
    started = time.perf_counter()
    texts = engine.translate(lines)
    return engine.name, time.perf_counter() - started, texts


def run_alone(function, threads: int, *args):
    """``function(*args)`` in a fresh interpreter whose OpenMP pool is sized to
    ``threads`` from the start, and no engine measured before it in the same process.
    In one process CTranslate2 float32 ran slower at 2 threads than at 1, plausibly
    because torch's OpenMP threads, left spin-waiting by the engine before, took its
    second core."""
    with ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn")) as pool:
        with threads_of_spawned_children(threads):
            future = pool.submit(function, *args)  # the child starts here
        return future.result()


def profile_ours(model: Path, lines: list[str], threads: int) -> dict[str, tuple[float, int]]:
    """{operator: (self CPU ms, calls)} for one batch of our beam search at ``threads``
    threads. Runs in a process of its own, as ``measure`` does."""
    from torch.profiler import ProfilerActivity, profile

    engine = Ours(model, threads)
    engine.translate(lines[:BATCH])
    with profile(activities=[ProfilerActivity.CPU]) as profiler:
        engine.translate(lines[:BATCH])
    return {event.key: (event.self_cpu_time_total / 1000, event.count) for event in profiler.key_averages()}


def print_profiles(model: Path, lines: list[str], thread_counts: list[int]) -> None:
    """Where a second thread helps and where it does not: our beam search's operators by
    self time at each thread count, side by side. An operator whose time does not fall
    with more threads is per-op overhead or a kernel that runs on one thread."""
    profiles = [run_alone(profile_ours, threads, model, lines, threads) for threads in thread_counts]
    first = profiles[0]
    top = sorted(first, key=lambda op: -first[op][0])[:14]
    totals = [sum(ms for ms, _ in profile.values()) for profile in profiles]
    print(f"\nOur beam search, one batch of {BATCH} sentences, self CPU time by operator (ms):\n")
    print("| operator | calls | " + " | ".join(f"{t} thread(s)" for t in thread_counts) + " | speedup |")
    print("|---|---:|" + "---:|" * (len(thread_counts) + 1))
    for op in top + ["total"]:
        times = totals if op == "total" else [profile.get(op, (0.0, 0))[0] for profile in profiles]
        calls = "" if op == "total" else f"{first[op][1]:,}"
        speedup = times[0] / times[-1] if times[-1] else float("nan")
        print(f"| {op} | {calls} | " + " | ".join(f"{ms:,.1f}" for ms in times) + f" | {speedup:.2f}x |")


def config_model_and_test_split(config_path: str, name: str, artifact_root: str | None):
    """The model file of ``name`` in an experiment, and its cleaned test split."""
    from pipeline.core.artifacts import ArtifactState, ArtifactStore
    from pipeline.config import load_config
    from pipeline.graph import find_stage, plan
    from stages.clean import read_split
    from stages.shared.inference.model_file import MODEL_FILES, weights_file
    from stages.shared.names import train_stage

    config = load_config(config_path)
    store = ArtifactStore(artifact_root or config.artifact_root)
    planned = plan(config, store)
    trained = find_stage(planned, train_stage(name))
    if trained.status.state != ArtifactState.CACHED:
        raise SystemExit(f"{config_path}: {name} is not trained (nmt run {config_path} first)")
    clean = find_stage(planned, "clean")
    test = read_split(store.local_path("clean", clean.key), config.evaluate.split)
    return (weights_file(store.local_path(trained.stage.name, trained.key, MODEL_FILES)),
            test.column("src").to_pylist(), test.column("tgt").to_pylist())


def sentences_of(args) -> tuple[Path, list[str], list[str]]:
    if args.config:
        model, sources, references = config_model_and_test_split(args.config, args.model, args.artifact_root)
    else:
        model, sources, references = args.model_dir, args.sources.read_text().splitlines(), \
            args.references.read_text().splitlines()
    return model, sources[:args.sentences], references[:args.sentences]


def best_against_best(threads: int, rates: dict[str, float]) -> str:
    """A line comparing the fastest way each engine has of using ``threads`` threads
    (one batch on all of them, or one batch per thread), CTranslate2 float32 to ours."""
    def fastest(prefix: str) -> tuple[str, float] | None:
        mine = {name: rate for name, rate in rates.items() if name == prefix or name.startswith(prefix + ",")}
        return max(mine.items(), key=lambda item: item[1]) if mine else None

    ours, theirs = fastest("ours"), fastest("CTranslate2 float32")
    if ours is None or theirs is None:
        return f"{threads} thread(s): no CTranslate2 float32 to compare with"
    return (f"{threads} thread(s), fastest of each: {theirs[0]} {theirs[1]:,.1f} sentences/s, {ours[0]} "
            f"{ours[1]:,.1f}: CTranslate2 float32 / ours = {theirs[1] / ours[1]:.2f}x")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("model_dir", nargs="?", type=Path, help="a train artifact directory or model file")
    parser.add_argument("--config", help="an experiment YAML: its trained --model, on its test split")
    parser.add_argument("--model", help="which model of --config")
    parser.add_argument("--artifact-root", default=os.environ.get("NMT_ARTIFACT_ROOT"))
    parser.add_argument("--sources", type=Path)
    parser.add_argument("--references", type=Path)
    parser.add_argument("--sentences", type=int, default=500)
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--repeats", type=int, default=1,
                        help="runs of each engine, in turn with the others; the table shows the median")
    parser.add_argument("--profile", action="store_true", help="also profile our beam search at each thread count")
    parser.add_argument("--device", default=None,
                        help="cuda (or cpu): the device table, engines at --batch-sizes, instead of the thread table")
    parser.add_argument("--batch-sizes", type=int, nargs="+", default=[64, 256], help="the device table's")
    args = parser.parse_args()
    if not args.config and not (args.model_dir and args.sources and args.references):
        parser.error("give MODEL_DIR with --sources and --references, or --config with --model")
    model, lines, references = sentences_of(args)
    if args.device is not None:
        device_table(model, lines, references, args.device, args.batch_sizes)
        return

    with tempfile.TemporaryDirectory(prefix="decode-speed-") as scratch:
        specs, skipped = export_engines(model, Path(scratch))
        tgt_spm = spm.SentencePieceProcessor(model_file=str(ModelFiles.find(model).tgt_spm))
        print(f"{len(lines)} sentences, beam {BEAM}, batches of {BATCH}, {model}; "
              f"each engine in a fresh process")
        for reason in skipped:
            print(f"left out: {reason}")
        if args.repeats > 1:
            print(f"each engine {args.repeats} times, in turn with the others; the median run, "
                  "and every run's sentences/s")
        summaries = []
        print("\n| engine | threads | sentences/s | tokens/s | BLEU | engine / ours | runs |")
        print("|---|---:|---:|---:|---:|---:|---|")
        for threads in args.threads:
            # Engines in turn, round after round: a slow spell of a shared machine then
            # falls on every engine rather than on one.
            # With more than one thread, also one batch per thread at a time: ours in
            # worker processes, CTranslate2 with inter_threads (Hugging Face has neither).
            engines = specs + [spec.with_workers(threads) for spec in specs
                               if threads > 1 and spec.kind in ("ours", "ctranslate2")]
            runs: dict[str, list] = {}
            for _ in range(args.repeats):
                for spec in engines:
                    name, seconds, texts = run_alone(measure, threads, spec, threads, lines)
                    runs.setdefault(name, []).append((seconds, texts))
            ours_rate, rates = None, {}
            for name, measured in runs.items():
                seconds, texts = sorted(measured, key=lambda run: run[0])[len(measured) // 2]  # the median
                tokens = sum(len(ids) + 1 for ids in tgt_spm.encode(texts))
                bleu = BLEU().corpus_score(texts, [references]).score
                rate = len(lines) / seconds
                ours_rate = ours_rate or rate
                rates[name] = rate
                every = ", ".join(f"{len(lines) / run_seconds:,.1f}" for run_seconds, _ in measured)
                print(f"| {name} | {threads} | {rate:,.1f} | {tokens / seconds:,.0f} | {bleu:.2f} | "
                      f"{rate / ours_rate:.2f}x | {every} |", flush=True)
            summaries.append(best_against_best(threads, rates))
        print()
        for summary in summaries:
            print(summary)
    if args.profile:
        print_profiles(model, lines, args.threads)


if __name__ == "__main__":
    main()
