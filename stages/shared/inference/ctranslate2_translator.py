"""A trained model run by CTranslate2 instead of our own beam search: the inference
engine MT teams deploy with. The model is exported (``stages.shared.export``) into a scratch
directory of this process's own, then run by ``ctranslate2.Translator``, or
``ctranslate2.Generator`` for a decoder-only model.

It takes sources encoded as ours are (token ids ending with EOS) and a
``SearchSettings``, and gives back ``Translation``s as ``Translator`` does, so that the
service (``nmt serve --backend ctranslate2``) and the evaluate stage (its
``ctranslate2`` speed and BLEU columns) can put either engine behind the same calls.

Scores: ours is the length-penalized log-probability of GNMT (Wu et al. 2016, eq. 14,
``length_penalty`` is alpha); CTranslate2 divides the log-probability by
length^``length_penalty``. The same setting is passed to both; the rankings are close
but not the same.
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

import sentencepiece as spm

from stages.shared.inference.beam import Hypothesis
from stages.shared.inference.search import SearchSettings, output_room
from stages.shared.inference.translator import Translation


class CTranslate2Translator:
    """``model_dir``: a model file or train artifact; ``quantization``: CTranslate2's
    weight type (int8, ...; None keeps float32). Raises ``stages.shared.export.ExportError``
    for a model CTranslate2 cannot run (the rnn family, prefix attention)."""

    name = "ctranslate2"

    def __init__(self, model_dir: Path, device: str = "cpu", threads: int = 1, quantization: str | None = None):
        import ctranslate2

        from stages.shared.export import export_model

        self._scratch = tempfile.TemporaryDirectory(prefix="nmt-ct2-")
        exported = export_model(model_dir, "ctranslate2", Path(self._scratch.name) / "model", quantization)
        self.info = json.loads((exported / "nmt_export.json").read_text())
        self.src_spm = spm.SentencePieceProcessor(model_file=str(exported / self.info["src_spm"]))
        self.tgt_spm = spm.SentencePieceProcessor(model_file=str(exported / self.info["tgt_spm"]))
        device, _, index = device.partition(":")
        engine = {"generator": ctranslate2.Generator, "translator": ctranslate2.Translator}[self.info["engine"]]
        self.engine = engine(str(exported), device=device, device_index=int(index or 0), intra_threads=threads)

    def translate_batch(self, sources: list[list[int]], search: SearchSettings) -> list[list[Translation]]:
        """CTranslate2 gives back pieces and its own normalized score only: the
        ``Hypothesis`` holds the pieces' ids, and that score as its log-probability too.

        Every search setting is honoured as our search does: the beam, n-best and length
        penalty are CTranslate2's own; ``min_length`` bans EOS before that many tokens;
        each sentence's output limit (``max_length_a`` x its length + ``max_length_b``,
        within the model's positions, EOS included) is CTranslate2's batch-wide maximum,
        so sentences are searched in groups of one limit each."""
        limits = [search.output_length_limit(len(ids), output_room(self.info.get("max_positions"), len(ids)))
                  for ids in sources]
        found: list[list[Translation]] = [[] for _ in sources]
        for limit in sorted(set(limits)):
            rows = [row for row, row_limit in enumerate(limits) if row_limit == limit]
            for row, translations in zip(rows, self._search([sources[row] for row in rows], search, limit)):
                found[row] = translations
        return found

    def _search(self, sources: list[list[int]], search: SearchSettings, limit: int) -> list[list[Translation]]:
        # Pieces without the EOS that add_source_eos (or the prompt) puts back.
        tokens = [[self.src_spm.id_to_piece(i) for i in ids[:-1]] for ids in sources]
        # CTranslate2 counts generated tokens without EOS, and stops at its maximum
        # without one; ours counts EOS, which ends every hypothesis at the limit.
        common = dict(beam_size=search.beam_size, num_hypotheses=search.nbest, length_penalty=search.length_penalty,
                      return_scores=True, max_batch_size=64)
        if "prompt" in self.info:
            before, after = self.info["prompt"]["before_source"], self.info["prompt"]["after_source"]
            results = self.engine.generate_batch([before + t + after for t in tokens], include_prompt_in_result=False,
                                                 max_length=limit - 1, min_length=search.min_length, **common)
            hypotheses = [r.sequences for r in results]
        else:
            results = self.engine.translate_batch(tokens, max_decoding_length=limit - 1,
                                                  min_decoding_length=search.min_length, **common)
            hypotheses = [r.hypotheses for r in results]
        return [[Translation(self.tgt_spm.decode_pieces(pieces),
                             Hypothesis(tuple(self.tgt_spm.piece_to_id(pieces)), score, score))
                 for pieces, score in zip(hypothesis_list, result.scores)]
                for hypothesis_list, result in zip(hypotheses, results)]
