"""Decoding speed of trained models: sentences and tokens per second for greedy and
beam search, by batch size and precision, on the evaluate stage's source sentences.

Uses the same ``Translator`` the evaluate stage and ``nmt translate`` use, one thread
by default (what one evaluate task gets under the runner). Each configuration decodes
the same sentences once after a warm-up batch. BLEU is printed beside the speed so a
faster setting that changes the output shows it.

    python benchmarks/decode_speed.py MODEL_DIR [MODEL_DIR ...] --sources source.txt --references reference.txt
    python benchmarks/decode_speed.py --config configs/multi30k_en_de.yaml   # every trained model there
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

import torch
from sacrebleu.metrics import BLEU

from pipeline.hardware import detect_device, native_precisions
from stages.evaluate.translator import SearchSettings, Translator


def trained_models(config_path: str, artifact_root: str | None) -> tuple[list[tuple[str, Path]], Path, Path]:
    """(name, train artifact) of every trained model of a config, and the cleaned test split as files."""
    import tempfile

    from pipeline.artifacts import ArtifactState, ArtifactStore
    from pipeline.config import load_config
    from pipeline.graph import find_stage, plan
    from stages.clean import read_split
    from stages.names import train_stage, trained_model

    config = load_config(config_path)
    store = ArtifactStore(artifact_root or config.artifact_root)
    planned = plan(config, store)
    trained = [find_stage(planned, train_stage(spec.name)) for spec in config.models]
    models = [(trained_model(item.stage.name), store.local_path(item.stage.name, item.key))
              for item in trained if item.status.state == ArtifactState.CACHED]
    clean = find_stage(planned, "clean")
    test = read_split(store.local_path("clean", clean.key), config.evaluate.split)
    scratch = Path(tempfile.mkdtemp(prefix="decode-speed-"))
    (scratch / "source.txt").write_text("\n".join(test.column("src").to_pylist()) + "\n")
    (scratch / "reference.txt").write_text("\n".join(test.column("tgt").to_pylist()) + "\n")
    return models, scratch / "source.txt", scratch / "reference.txt"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("models", nargs="*", type=Path, help="train artifact directories (model.pt inside)")
    parser.add_argument("--config", help="benchmark every trained model of this experiment")
    parser.add_argument("--artifact-root", default=os.environ.get("NMT_ARTIFACT_ROOT"),
                        help="the config's store; default: NMT_ARTIFACT_ROOT, else the config's artifact_root")
    parser.add_argument("--sources", type=Path)
    parser.add_argument("--references", type=Path)
    parser.add_argument("--sentences", type=int, default=500)
    parser.add_argument("--beams", type=int, nargs="+", default=[1, 4])
    parser.add_argument("--batch-sizes", type=int, nargs="+", default=[1, 16, 64])
    parser.add_argument("--precisions", nargs="+", choices=["fp32", "bf16", "fp16"], default=None,
                        help="default: fp32, and bf16 where the device runs it natively")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--device", default="cpu")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    models = [(path.name, path) for path in args.models]
    sources, references = args.sources, args.references
    if args.config:
        models, sources, references = trained_models(args.config, args.artifact_root)
    if not models or sources is None or references is None:
        parser.error("give MODEL_DIRs with --sources and --references, or --config")
    lines = sources.read_text().splitlines()[:args.sentences]
    refs = references.read_text().splitlines()[:args.sentences]

    found = detect_device(args.device)
    precisions = args.precisions or native_precisions(found)
    print(f"{len(lines)} sentences, {args.threads} thread(s), {found.describe()}"
          + ("" if found.bf16 or "bf16" in precisions else f"; bf16 skipped: {found.why}") + "\n")
    print("| model | precision | beam | batch | sentences/s | tokens/s | BLEU |")
    print("|---|---|---:|---:|---:|---:|---:|")
    for name, directory in models:
        for precision in precisions:
            translator = Translator.from_file(directory / "model.pt", args.device, precision)
            for beam in args.beams:
                for batch_size in args.batch_sizes:
                    search = SearchSettings(beam_size=beam)
                    translator.translate(lines[:batch_size], search, batch_size)  # warm-up
                    started = time.perf_counter()
                    results = translator.translate(lines, search, batch_size)
                    seconds = time.perf_counter() - started
                    tokens = sum(len(line[0].hypothesis.tokens) + 1 for line in results)
                    bleu = BLEU().corpus_score([line[0].text for line in results], [refs]).score
                    print(f"| {name} | {precision} | {beam} | {batch_size} | {len(lines) / seconds:,.1f} | "
                          f"{tokens / seconds:,.0f} | {bleu:.2f} |", flush=True)


if __name__ == "__main__":
    main()
