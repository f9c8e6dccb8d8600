"""What a service replica translates with: our own beam search, or the model exported
to CTranslate2. Both take sources encoded by ``SourceEncoder`` and the request's search
options, and give back the n best (text, score) per sentence, in order.

Scores: ours is the length-penalized log-probability of GNMT (Wu et al. 2016, eq. 14,
``length_penalty`` is alpha); CTranslate2 divides the log-probability by
length^``length_penalty``. The same option is passed to both; the rankings are close but
not the same.
"""

from __future__ import annotations

import json
import tempfile
from dataclasses import dataclass
from pathlib import Path

import sentencepiece as spm

from stages.evaluate.translator import ModelFiles


@dataclass(frozen=True)
class SearchOptions:
    beam: int = 4
    nbest: int = 1
    length_penalty: float = 0.6
    max_length_b: int = 50  # at most source length + this many output tokens


class SourceEncoder:
    """Sentences to the token ids every backend reads (the source SentencePiece model's
    ids, EOS appended): what the length limit counts. Apart from the backends so that the
    replica's request handler encodes without loading a model."""

    def __init__(self, model_dir: Path):
        files = ModelFiles.find(model_dir)
        self.spm = spm.SentencePieceProcessor(model_file=str(files.src_spm))
        self.eos_id = json.loads((files.weights.parent / "vocab.json").read_text())["special_ids"]["eos"]

    def encode(self, sentences: list[str]) -> list[list[int]]:
        return [ids + [self.eos_id] for ids in self.spm.encode(sentences, out_type=int)]


def open_backend(model_dir: Path, backend: str, device: str, threads: int, quantization: str | None = None):
    """``backend``: "ours" or "ctranslate2" (``quantization`` is its weights' type)."""
    if backend == "ctranslate2":
        return CTranslate2Backend(model_dir, device, threads, quantization)
    return OurBackend(model_dir, device, threads)


class OurBackend:
    name = "ours"

    def __init__(self, model_dir: Path, device: str, threads: int, precision: str = "auto"):
        """``precision``: auto (as nmt translate: bf16 where the replica's device runs it
        natively, else fp32; fp16 on older GPUs), resolved on the replica's own device."""
        import torch

        from pipeline.hardware import detect_device, resolve_precision
        from stages.evaluate.translator import Translator

        torch.set_num_threads(threads)
        resolved = resolve_precision(precision, detect_device(device), "precision")
        self.translator = Translator.from_file(model_dir, device, resolved)

    def translate(self, sources: list[list[int]], options: SearchOptions) -> list[list[tuple[str, float]]]:
        from stages.evaluate.translator import SearchSettings

        search = SearchSettings(beam_size=options.beam, nbest=options.nbest, length_penalty=options.length_penalty,
                                max_length_b=options.max_length_b)
        results = self.translator.translate_ids(sources, search, batch_size=64)
        return [[(t.text, t.hypothesis.score) for t in translations] for translations in results]


class CTranslate2Backend:
    """The model exported (``stages.export``) into a directory of the replica's own, then
    run by ``ctranslate2.Translator``, or ``ctranslate2.Generator`` for a decoder-only model."""

    name = "ctranslate2"

    def __init__(self, model_dir: Path, device: str, threads: int, quantization: str | None = None):
        import ctranslate2

        from stages.export import export_model

        self._scratch = tempfile.TemporaryDirectory(prefix="nmt-ct2-")
        exported = export_model(model_dir, "ctranslate2", Path(self._scratch.name) / "model", quantization)
        self.info = json.loads((exported / "nmt_export.json").read_text())
        self.src_spm = spm.SentencePieceProcessor(model_file=str(exported / self.info["src_spm"]))
        self.tgt_spm = spm.SentencePieceProcessor(model_file=str(exported / self.info["tgt_spm"]))
        device, _, index = device.partition(":")
        engine = ctranslate2.Generator if self.info["family"] == "decoder_only" else ctranslate2.Translator
        self.engine = engine(str(exported), device=device, device_index=int(index or 0), intra_threads=threads)

    def translate(self, sources: list[list[int]], options: SearchOptions) -> list[list[tuple[str, float]]]:
        # Pieces without the EOS that add_source_eos (or the prompt) puts back.
        tokens = [[self.src_spm.id_to_piece(i) for i in ids[:-1]] for ids in sources]
        common = dict(beam_size=options.beam, num_hypotheses=options.nbest, length_penalty=options.length_penalty,
                      return_scores=True, max_batch_size=64)
        if "prompt" in self.info:
            before, after = self.info["prompt"]["before_source"], self.info["prompt"]["after_source"]
            results = self.engine.generate_batch([before + t + after for t in tokens], include_prompt_in_result=False,
                                                 max_length=max(map(len, tokens)) + options.max_length_b, **common)
            hypotheses = [r.sequences for r in results]
        else:
            results = self.engine.translate_batch(tokens, max_decoding_length=max(map(len, tokens)) +
                                                  options.max_length_b, **common)
            hypotheses = [r.hypotheses for r in results]
        return [[(self.tgt_spm.decode_pieces(h), score) for h, score in zip(found, result.scores)]
                for found, result in zip(hypotheses, results)]
