"""The beam search's outputs on fixed cases, recorded so that a rewrite of the search
can be checked against what it gave before (``tests/data/beam_outputs.json``).

The cases: each family's tiny model, initialised from a fixed seed and run in float64,
over the first test sentences of the checked-in Multi30k sample (words mapped to ids
by their rank in the sample), and a model whose next-token distribution is a fixed
random function of its prefix with a bias towards EOS, so that hypotheses also finish
before their length limit. Each under several search settings: greedy, a beam with
n-best lists, a minimum length with a short limit, banned tokens.

Float64 models make the log-probabilities the search reads (float32) the same on any
CPU: a difference in the last bits of a float64 sum does not survive rounding to
float32, so the recorded tokens and scores do not depend on the machine's kernels.

    python -m tests.beam_outputs            # compare with the record
    python -m tests.beam_outputs --record   # record the search as it is now

Record only where the search is meant to give other outputs, and say why in the commit.
"""

from __future__ import annotations

import argparse
import gzip
import json
import sys
from pathlib import Path

import torch

from stages.shared.inference.beam import beam_search
from stages.shared.models.build import build_model

REPO = Path(__file__).resolve().parents[1]
RECORD = REPO / "tests" / "data" / "beam_outputs.json"
SAMPLE = REPO / "tests" / "data" / "multi30k" / "test_2016_flickr.en.gz"
VOCAB, PAD, UNK, BOS, EOS, SRC_TAG, TGT_TAG = 64, 0, 1, 2, 3, 4, 5
SPECIAL = {"bos_id": BOS, "eos_id": EOS, "pad_id": PAD}
SENTENCES = 6

# name: beam_search's keyword arguments beside the model, source and special ids
SETTINGS = {
    "greedy": {"beam_size": 1},
    "beam4_nbest4": {"beam_size": 4, "nbest": 4},
    "beam5_alpha1_min3_short": {"beam_size": 5, "nbest": 2, "length_penalty": 1.0, "min_length": 3,
                                "max_length_a": 0.5, "max_length_b": 4},
    "beam3_banned": {"beam_size": 3, "nbest": 3, "banned_ids": (PAD, BOS, 6, 7, 8, 9)},
}


def sample_sources(count: int = SENTENCES) -> torch.Tensor:
    """The first ``count`` sentences of the sample as (count, S) ids, padded, EOS-ended:
    a word's id is its rank among the sample's words, folded into the vocabulary."""
    with gzip.open(SAMPLE, "rt", encoding="utf-8") as lines:
        sentences = [line.split() for line, _ in zip(lines, range(count))]
    words = sorted({word for sentence in sentences for word in sentence})
    ids = {word: 6 + rank % (VOCAB - 6) for rank, word in enumerate(words)}
    width = max(len(sentence) for sentence in sentences) + 1
    src = torch.full((count, width), PAD, dtype=torch.long)
    for row, sentence in enumerate(sentences):
        src[row, :len(sentence) + 1] = torch.tensor([ids[word] for word in sentence] + [EOS])
    return src


class PrefixModel(torch.nn.Module):
    """Next-token log-probabilities a fixed random function of (source, prefix), EOS
    favoured by ``eos_bias``: hypotheses finish at different lengths."""

    def __init__(self, eos_bias: float = 1.5):
        super().__init__()
        self.eos_bias = eos_bias

    def start_decoding(self, src: torch.Tensor) -> torch.Tensor:
        return src[:, :1].clone()

    def decode_step(self, state: torch.Tensor, tokens: torch.Tensor):
        state = torch.cat([state, tokens.unsqueeze(1)], dim=1)
        rows = []
        for history in state.tolist():
            generator = torch.Generator().manual_seed(hash(tuple(history)) % (2**31))
            logits = torch.randn(VOCAB, generator=generator, dtype=torch.float64) * 2.0
            logits[EOS] += self.eos_bias
            rows.append(torch.log_softmax(logits, dim=0))
        return torch.stack(rows), state

    def reorder_state(self, state: torch.Tensor, order: torch.Tensor, sentences=None) -> torch.Tensor:
        return state.index_select(0, order)


def models() -> dict[str, torch.nn.Module]:
    built = {}
    for family in ("transformer", "rnn", "decoder_only"):
        torch.manual_seed(0)
        built[family] = build_model(family, "tiny", {}, VOCAB, VOCAB, (SRC_TAG, TGT_TAG), PAD).double().eval()
    built["prefix_eos_bias"] = PrefixModel()
    return built


def outputs() -> dict[str, list]:
    """{"model/setting": per sentence, its hypotheses as [tokens, score to 4 decimals]}."""
    src, result = sample_sources(), {}
    for model_name, model in models().items():
        for setting_name, settings in SETTINGS.items():
            hypotheses = beam_search(model, src, **SPECIAL, **settings)
            result[f"{model_name}/{setting_name}"] = [
                [[list(h.tokens), round(h.score, 4)] for h in sentence] for sentence in hypotheses]
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--record", action="store_true", help="record the search's outputs as they are now")
    args = parser.parse_args()
    now = outputs()
    if args.record:
        RECORD.write_text(json.dumps(now, indent=1) + "\n")
        print(f"recorded {len(now)} cases in {RECORD.relative_to(REPO)}")
        return 0
    changed = differences(now, json.loads(RECORD.read_text()))
    print("\n".join(changed) or "every case as recorded")
    return 1 if changed else 0


def differences(now: dict[str, list], recorded: dict[str, list], tolerance: float = 2e-3) -> list[str]:
    """The cases whose tokens differ, or whose scores differ by more than ``tolerance``
    (a score is a float32 sum: its last digits are not the search's)."""
    def same(a: list, b: list) -> bool:
        return len(a) == len(b) and all(
            len(x) == len(y) and all(hx[0] == hy[0] and abs(hx[1] - hy[1]) <= tolerance for hx, hy in zip(x, y))
            for x, y in zip(a, b))

    return sorted(name for name in now.keys() | recorded.keys()
                  if name not in now or name not in recorded or not same(now[name], recorded[name]))


if __name__ == "__main__":
    sys.exit(main())
