"""Decoding speed against the engines people ship with, side by side in one run: the
same trained Transformer, the same sentences, beam 4, batches of 64, at 1 and 2 threads.

- ours: ``Translator``, what the evaluate stage, ``nmt translate`` and ``nmt serve`` use;
- Hugging Face: the model exported as a ``MarianMTModel`` (``nmt export --format
  huggingface``), ``generate(num_beams=4)``; post-LN models only (Marian's layout);
- CTranslate2 float32 and int8: the model exported with ``nmt export --format
  ctranslate2``, ``Translator.translate_batch``.

Each engine translates the sentences once after a warm-up batch. Tokens/s counts output
SentencePiece tokens (plus EOS) of every engine's text with the same model, so engines
are counted alike. BLEU (sacreBLEU, cased) sits beside the speed: an engine that is
faster because it searches less shows it. Length penalties differ in kind (ours: GNMT's
alpha 0.6; Hugging Face and CTranslate2: length^1), so BLEU may differ a little.

    python benchmarks/decode_speed.py MODEL_DIR --sources src.txt --references ref.txt
    python benchmarks/decode_speed.py --config configs/multi30k_en_de.yaml --model transformer_small
    python benchmarks/decode_speed.py ... --profile   # where our beam search spends a step's time
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

import sentencepiece as spm
import torch
from sacrebleu.metrics import BLEU

from stages.evaluate.translator import ModelFiles, SearchSettings, Translator
from stages.export import ExportError, export_model

BEAM, BATCH, MAX_LENGTH_B = 4, 64, 50


class Ours:
    name = "ours"

    def __init__(self, model: Path, scratch: Path):
        self.translator = Translator.from_file(model)

    def translate(self, lines: list[str], threads: int) -> list[str]:
        torch.set_num_threads(threads)
        search = SearchSettings(beam_size=BEAM, max_length_b=MAX_LENGTH_B)
        return [t[0].text for t in self.translator.translate(lines, search, BATCH)]


class HuggingFace:
    name = "Hugging Face generate"

    def __init__(self, model: Path, scratch: Path):
        from transformers import AutoTokenizer, MarianMTModel

        exported = export_model(model, "huggingface", scratch / "hf")
        self.tokenizer = AutoTokenizer.from_pretrained(exported)
        self.model = MarianMTModel.from_pretrained(exported).eval()

    def translate(self, lines: list[str], threads: int) -> list[str]:
        torch.set_num_threads(threads)
        order = sorted(range(len(lines)), key=lambda i: -len(lines[i]))  # batches of similar length, as ours
        texts: list[str] = [""] * len(lines)
        for start in range(0, len(order), BATCH):
            chunk = order[start:start + BATCH]
            batch = self.tokenizer([lines[i] for i in chunk], return_tensors="pt", padding=True)
            with torch.inference_mode():
                generated = self.model.generate(**batch, num_beams=BEAM, do_sample=False,
                                                max_new_tokens=batch["input_ids"].size(1) + MAX_LENGTH_B)
            for i, text in zip(chunk, self.tokenizer.batch_decode(generated, skip_special_tokens=True)):
                texts[i] = text
        return texts


class CTranslate2:
    def __init__(self, model: Path, scratch: Path, quantization: str):
        self.name, self.quantization = f"CTranslate2 {quantization}", quantization
        self.exported = export_model(model, "ctranslate2", scratch / f"ct2-{quantization}", quantization)
        files = ModelFiles.find(model)
        self.src_spm = spm.SentencePieceProcessor(model_file=str(files.src_spm))
        self.tgt_spm = spm.SentencePieceProcessor(model_file=str(files.tgt_spm))
        self.engines: dict = {}

    def translate(self, lines: list[str], threads: int) -> list[str]:
        import ctranslate2

        if threads not in self.engines:
            self.engines[threads] = ctranslate2.Translator(str(self.exported), intra_threads=threads,
                                                           compute_type=self.quantization)
        tokens = self.src_spm.encode(lines, out_type=str)
        results = self.engines[threads].translate_batch(tokens, beam_size=BEAM, max_batch_size=BATCH,
                                                        max_decoding_length=max(map(len, tokens)) + MAX_LENGTH_B)
        return [self.tgt_spm.decode_pieces(result.hypotheses[0]) for result in results]


def engines(model: Path, scratch: Path) -> tuple[list, list[str]]:
    """The engines this model can run on, and why the others are left out."""
    made, skipped = [Ours(model, scratch)], []
    for build in (lambda: HuggingFace(model, scratch), lambda: CTranslate2(model, scratch, "float32"),
                  lambda: CTranslate2(model, scratch, "int8")):
        try:
            made.append(build())
        except ExportError as error:
            skipped.append(str(error))
    return made, skipped


def profile_ours(model: Path, lines: list[str], threads: int) -> None:
    """Self CPU time by operator for one batch of our beam search: how much of a step is
    matrix products (what a second thread can split) and how much is per-op overhead."""
    from torch.profiler import ProfilerActivity, profile

    torch.set_num_threads(threads)
    translator = Translator.from_file(model)
    search = SearchSettings(beam_size=BEAM, max_length_b=MAX_LENGTH_B)
    translator.translate(lines[:BATCH], search, BATCH)
    with profile(activities=[ProfilerActivity.CPU]) as profiler:
        translator.translate(lines[:BATCH], search, BATCH)
    print(f"\nOur beam search, one batch of {BATCH}, {threads} thread(s), by self CPU time:\n")
    print(profiler.key_averages().table(sort_by="self_cpu_time_total", row_limit=15))


def config_model_and_test_split(config_path: str, name: str, artifact_root: str | None):
    """The model file of ``name`` in an experiment, and its cleaned test split."""
    from pipeline.artifacts import ArtifactState, ArtifactStore
    from pipeline.config import load_config
    from pipeline.graph import find_stage, plan
    from stages.clean import read_split
    from stages.names import train_stage
    from stages.train import SERVING_FILES, weights_file

    config = load_config(config_path)
    store = ArtifactStore(artifact_root or config.artifact_root)
    planned = plan(config, store)
    trained = find_stage(planned, train_stage(name))
    if trained.status.state != ArtifactState.CACHED:
        raise SystemExit(f"{config_path}: {name} is not trained (nmt run {config_path} first)")
    clean = find_stage(planned, "clean")
    test = read_split(store.local_path("clean", clean.key), config.evaluate.split)
    return (weights_file(store.local_path(trained.stage.name, trained.key, SERVING_FILES)),
            test.column("src").to_pylist(), test.column("tgt").to_pylist())


def sentences_of(args) -> tuple[Path, list[str], list[str]]:
    if args.config:
        model, sources, references = config_model_and_test_split(args.config, args.model, args.artifact_root)
    else:
        model, sources, references = args.model_dir, args.sources.read_text().splitlines(), \
            args.references.read_text().splitlines()
    return model, sources[:args.sentences], references[:args.sentences]


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
    parser.add_argument("--profile", action="store_true", help="also profile our beam search at each thread count")
    args = parser.parse_args()
    if not args.config and not (args.model_dir and args.sources and args.references):
        parser.error("give MODEL_DIR with --sources and --references, or --config with --model")
    model, lines, references = sentences_of(args)

    with tempfile.TemporaryDirectory(prefix="decode-speed-") as scratch:
        made, skipped = engines(model, Path(scratch))
        tgt_spm = spm.SentencePieceProcessor(model_file=str(ModelFiles.find(model).tgt_spm))
        print(f"{len(lines)} sentences, beam {BEAM}, batches of {BATCH}, {model}")
        for reason in skipped:
            print(f"left out: {reason}")
        print("\n| engine | threads | sentences/s | tokens/s | BLEU | ours / engine |")
        print("|---|---:|---:|---:|---:|---:|")
        for threads in args.threads:
            ours_rate = None
            for engine in made:
                engine.translate(lines[:BATCH], threads)  # warm-up
                started = time.perf_counter()
                texts = engine.translate(lines, threads)
                seconds = time.perf_counter() - started
                tokens = sum(len(ids) + 1 for ids in tgt_spm.encode(texts))
                bleu = BLEU().corpus_score(texts, [references]).score
                rate = len(lines) / seconds
                ours_rate = ours_rate or rate
                print(f"| {engine.name} | {threads} | {rate:,.1f} | {tokens / seconds:,.0f} | {bleu:.2f} | "
                      f"{ours_rate / rate:.2f}x |", flush=True)
        if args.profile:
            for threads in args.threads:
                profile_ours(model, lines, threads)


if __name__ == "__main__":
    main()
