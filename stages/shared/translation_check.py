"""Does a trained model translate? Two measurements the report's gate reads
(``stages/shared/gate.py``), made on every evaluated run:

- **source use**: the model's mean target cross-entropy (nats per target token, EOS
  included, as the train stage's validation loss) on the validation split with each
  sentence's source replaced by another sentence's, minus the same with the true
  sources, with its standard error over the sentences (``source_use_error``: the gate
  calls a run within two of them of its threshold undecided). A model that ignores its
  source loses nothing when the sources are swapped (about 0); one that translates
  loses a lot. The swap is one fixed derangement (no sentence keeps its own source),
  the same for every run, so runs are compared on the same pairs.
- **collapse** (``stages/shared/output_collapse.py``): of the test outputs, the share
  that are the run's most frequent output line, and the share of distinct lines. A
  model that learned the target side's likeliest sentence writes it for most inputs.
"""

from __future__ import annotations

import numpy as np
import torch
from torch.nn.utils.rnn import pad_sequence

from stages.shared.inference.beam import model_positions
from stages.shared.inference.translator import Translator
from stages.shared.models.protocol import TranslationModel

# Sentences per forward pass: the validation split is short sentences, and memory is
# small at any size this runs at.
BATCH_SENTENCES = 64
# The derangement's seed: fixed, so that every run's source use is measured on the same
# mismatched pairs.
DERANGEMENT_SEED = 0


def derangement(count: int, seed: int = DERANGEMENT_SEED) -> list[int]:
    """For each sentence, the index of the other sentence whose source it gets: a random
    order, each sentence taking the next one's source in it (a single cycle, so none
    keeps its own)."""
    if count < 2:
        raise ValueError(f"a derangement needs two or more sentences, got {count}")
    order = np.random.default_rng(seed).permutation(count)
    other = np.empty(count, dtype=np.int64)
    other[order] = np.roll(order, -1)
    return other.tolist()


def sentence_nll(model: TranslationModel, sources: list[list[int]], targets: list[list[int]],
                 special_ids: dict, device: str = "cpu") -> tuple[np.ndarray, np.ndarray]:
    """Each sentence's summed NLL of its target (nats) given its source, teacher-forced,
    and its number of target tokens: each target ends with EOS (as the tokenize stage
    writes it), and is fed after BOS. The target's NLL is what every family's loss
    reports (``translation_loss``): the cross-entropy of ``model(src, tgt_in)``."""
    pad_id, bos_id = special_ids["pad"], special_ids["bos"]
    nll, tokens = np.zeros(len(sources)), np.zeros(len(sources))
    # Sorted by length so that a batch pads little; each sentence's sum does not depend on it.
    order = sorted(range(len(sources)), key=lambda index: (len(sources[index]), len(targets[index])))
    was_training = model.training
    model.eval()
    with torch.no_grad():
        for start in range(0, len(order), BATCH_SENTENCES):
            chunk = order[start:start + BATCH_SENTENCES]
            src = pad_sequence([torch.tensor(sources[index]) for index in chunk], batch_first=True,
                               padding_value=pad_id)
            tgt_out = pad_sequence([torch.tensor(targets[index]) for index in chunk], batch_first=True,
                                   padding_value=pad_id)
            tgt_in = torch.cat([torch.full((len(chunk), 1), bos_id, dtype=torch.long), tgt_out[:, :-1]], dim=1)
            tgt_in = tgt_in.masked_fill(tgt_out == pad_id, pad_id)
            logits = model(src.to(device), tgt_in.to(device))
            log_probs = torch.log_softmax(logits.float(), dim=-1)
            keep = tgt_out.to(device) != pad_id
            token_nll = -log_probs.gather(-1, tgt_out.to(device).unsqueeze(-1)).squeeze(-1)
            nll[chunk] = torch.where(keep, token_nll, 0.0).sum(dim=1).double().cpu().numpy()
            tokens[chunk] = keep.sum(dim=1).cpu().numpy()
    model.train(was_training)
    return nll, tokens


def target_cross_entropy(model: TranslationModel, sources: list[list[int]], targets: list[list[int]],
                         special_ids: dict, device: str = "cpu") -> float:
    """Mean NLL per target token (nats) of ``targets`` given ``sources``."""
    nll, tokens = sentence_nll(model, sources, targets, special_ids, device)
    return float(nll.sum() / max(tokens.sum(), 1))


def source_use(model: TranslationModel, sources: list[list[int]], targets: list[list[int]], special_ids: dict,
               device: str = "cpu") -> dict:
    """``valid_nll`` (true sources), ``valid_nll_other_source`` (each sentence given
    another's source, ``derangement``) and their difference, ``source_use``, in nats per
    target token; with ``source_use_error``, its standard error over the sentences.

    Source use is a ratio of sums over sentences, sum(d_i) / sum(n_i), with d_i a
    sentence's NLL with another's source minus with its own and n_i its target tokens;
    its standard error is the ratio estimator's (the delta method): the spread of
    d_i - use * n_i over the sentences, sqrt(N / (N - 1) * sum(...^2)) / sum(n_i). It
    says how far another draw of validation sentences could move the measurement, which
    the gate weighs against its threshold."""
    true, tokens = sentence_nll(model, sources, targets, special_ids, device)
    other = derangement(len(sources))
    swapped, _ = sentence_nll(model, [sources[index] for index in other], targets, special_ids, device)
    total = max(tokens.sum(), 1)
    use = float((swapped - true).sum() / total)
    count = len(sources)
    residual = (swapped - true) - use * tokens
    error = float(np.sqrt(count / (count - 1) * np.sum(residual ** 2)) / total)
    return {"valid_nll": float(true.sum() / total), "valid_nll_other_source": float(swapped.sum() / total),
            "source_use": use, "source_use_error": error, "source_use_sentences": count}


def source_use_on(translator: Translator, sources: list[str], references: list[str]) -> dict:
    """The model's source use on these pairs (``translation_check.source_use``), in the
    weights' own precision (no autocast). Pairs too long for its position table (source
    and target together: the decoder-only model's layout) or empty on a side are left out."""
    encoded = translator.encode(sources)
    targets = [ids + [translator.eos_id] for ids in translator.tgt_spm.encode(references, out_type=int)]
    positions = model_positions(translator.model)
    pairs = [(src, tgt) for src, tgt in zip(encoded, targets) if src[:-1] and tgt[:-1]
             and (positions is None or len(src) + len(tgt) + 2 <= positions)]
    if len(pairs) < 2:
        return {"source_use": None, "source_use_skipped": f"{len(pairs)} usable validation pairs"}
    special = {"pad": translator.pad_id, "bos": translator.bos_id, "eos": translator.eos_id}
    return source_use(translator.model, [src for src, _ in pairs], [tgt for _, tgt in pairs], special,
                      translator.device)
