"""Attention weights of a trained model on one translation, for every layer and head,
and the hard word alignments they imply.

The models attend through fused kernels that never materialize the weights, so each
attention module can also compute them explicitly (``weights``); forward hooks call it
with the same inputs while the model re-reads its own translation teacher-forced
(``BOS y1 .. yn`` predicting ``y1 .. yn EOS``). Row t of a decoder-side map is the
query that predicts output token t; the maps are those of the decoding that produced
the translation, since incremental and teacher-forced decoding agree.

Maps per family:
- Transformer: encoder self-attention (source x source), decoder self-attention
  (predicted token x target input), cross-attention (predicted token x source);
- RNN: its attention (predicted token x source), one layer and one head;
- decoder-only: self-attention over ``<src-tag> source <tgt-tag> target`` (queries and
  keys alike); the language tags are marked.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor, nn

from stages.shared.inference.search import SearchSettings
from stages.shared.inference.translator import Translation, Translator
from stages.shared.models.families import family_of


@dataclass(frozen=True)
class AttentionMap:
    kind: str  # "encoder self-attention", "decoder self-attention", "cross-attention", "attention", "self-attention"
    layer: int  # 0-based
    weights: Tensor  # (heads, queries, keys), rows summing to 1
    queries: list[str]  # a label per row
    keys: list[str]  # a label per column


@dataclass(frozen=True)
class SentenceAttention:
    translation: Translation
    source_pieces: list[str]  # SentencePiece pieces of the source, EOS last
    target_pieces: list[str]  # of the translation, EOS last
    maps: list[AttentionMap]
    tags: tuple[str, ...] = ()  # labels that are language tags (decoder-only), to mark


def sentence_attention(translator: Translator, line: str, search: SearchSettings = SearchSettings(),
                       translation: Translation | None = None) -> SentenceAttention:
    """Translate ``line`` (unless its ``translation`` is given) and capture every
    attention map of the model on that translation."""
    model = translator.model
    source_ids = translator.encode([line])[0]
    if translation is None:
        translation = translator.translate_ids([source_ids], search)[0][0]
    target_ids = list(translation.hypothesis.tokens) + [translator.eos_id]
    src = torch.tensor([source_ids], device=translator.device)
    tgt_in = torch.tensor([[translator.bos_id] + target_ids[:-1]], device=translator.device)
    captured = capture(model, src, tgt_in)

    source = [translator.src_spm.id_to_piece(i) if i != translator.eos_id else "</s>" for i in source_ids]
    target = [translator.tgt_spm.id_to_piece(i) if i != translator.eos_id else "</s>" for i in target_ids]
    target_inputs = ["<s>"] + target[:-1]
    maps, tags = [], ()
    if any(kind == "self-attention" for kind, _ in captured):  # one stack over the tagged sequence
        src_tag, tgt_tag = (translator.src_spm.id_to_piece(i) for i in (model.src_tag_id, model.tgt_tag_id))
        sequence = [src_tag, *source, tgt_tag, *target[:-1]]
        tags = (src_tag, tgt_tag)
        maps = [AttentionMap("self-attention", layer, weights, sequence, sequence)
                for (_, layer), weights in captured.items()]
    else:
        for (kind, layer), weights in captured.items():
            queries = source if kind == "encoder self-attention" else target
            keys = target_inputs if kind == "decoder self-attention" else source
            maps.append(AttentionMap(kind, layer, weights, queries, keys))
    return SentenceAttention(translation, source, target, maps, tags)


@torch.no_grad()
def capture(model: nn.Module, src: Tensor, tgt_in: Tensor) -> dict[tuple[str, int], Tensor]:
    """{(kind, layer): weights (heads, queries, keys)} of one teacher-forced forward of a
    single sentence (``src`` (1, S), ``tgt_in`` (1, T)), from the attention modules the
    model's family names (``ModelFamily.attention_modules``)."""
    captured: dict[tuple[str, int], list[Tensor]] = {}
    handles = []
    for kind, layer, module in family_of(model).attention_modules(model):
        def hook(module, args, kwargs, output, key=(kind, layer)):
            captured.setdefault(key, []).append(module.weights_of_call(args, kwargs))
        handles.append(module.register_forward_hook(hook, with_kwargs=True))
    try:
        model.eval()
        model(src, tgt_in)
    finally:
        for handle in handles:
            handle.remove()
    # An attention that runs once per target step (the RNN's) gives a row each call: stacked in order.
    return {key: torch.cat(parts, dim=2)[0].cpu() for key, parts in captured.items()}


# --------------------------------------------------------------------------- alignments


def alignment_weights(sentence: SentenceAttention) -> Tensor:
    """(target pieces, source pieces) without EOS on either side: the last layer's
    attention from the target to the source, averaged over heads (fairseq's default
    alignment layer)."""
    source_count, target_count = len(sentence.source_pieces) - 1, len(sentence.target_pieces) - 1
    if sentence.maps[0].kind == "self-attention":  # decoder-only: the target rows, the source columns
        last = max(m.layer for m in sentence.maps)
        weights = next(m for m in sentence.maps if m.layer == last).weights.mean(dim=0)
        start = 1 + len(sentence.source_pieces)  # after the source tag and the source: the target tag
        return weights[start:start + target_count, 1:1 + source_count]
    cross = [m for m in sentence.maps if m.kind in ("cross-attention", "attention")]
    last = max(cross, key=lambda m: m.layer)
    return last.weights.mean(dim=0)[:target_count, :source_count]


def hard_alignment(sentence: SentenceAttention) -> list[tuple[int, int]]:
    """Word alignments (source word i, target word j), sorted: each target piece links to
    the source piece it attends to most, and pieces link the words they belong to (a
    piece starting with '▁' starts a word)."""
    weights = alignment_weights(sentence)
    if weights.numel() == 0:
        return []
    source_words = _word_index(sentence.source_pieces[:-1])
    target_words = _word_index(sentence.target_pieces[:-1])
    links = {(source_words[int(s)], target_words[t]) for t, s in enumerate(weights.argmax(dim=1))}
    return sorted(links, key=lambda link: (link[1], link[0]))


def _word_index(pieces: list[str]) -> list[int]:
    index, words = -1, []
    for position, piece in enumerate(pieces):
        if piece.startswith("\u2581") or position == 0:
            index += 1
        words.append(index)
    return words


def format_alignment(links: list[tuple[int, int]]) -> str:
    """fairseq's and fast_align's ``i-j`` pairs (source-target), space-separated."""
    return " ".join(f"{i}-{j}" for i, j in links)
