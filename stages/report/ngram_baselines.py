"""Source-blind baselines: n-gram models of the target side alone, on the same BPE pieces
the translation models predict, so that a validation loss can be read against what a
model that never looks at the source achieves.

Each baseline is an interpolated Kneser-Ney model (Kneser and Ney 1995; Chen and Goodman
1998, section 2.7) of order 1 to 4, fitted on the training split's targets and scored on
the validation split's: the mean negative log-likelihood in nats per target token, EOS
included and BOS not, as the train stage's validation loss counts them. Each sentence's
context starts with BOS repeated. The highest order counts n-grams; every lower order
counts continuations (how many distinct tokens precede an n-gram), and the unigram
order is interpolated with the uniform distribution over the vocabulary, so that no
piece has probability 0. One absolute discount per order, D = n1 / (n1 + 2 n2) from that
order's counts of counts. Written here (about fifty lines) rather than taken from a
library: KenLM estimates models with its own compiled tool (``lmplz``), which its Python
package does not ship, and nltk.lm's Kneser-Ney fails on contexts unseen in training
(ZeroDivisionError, nltk issue 2332) and gives the sentence-start token probability 0
(an infinite perplexity, issues 3065 and 3211). The unit tests check this one against
hand-computed values and that every context's probabilities sum to one.
"""

from __future__ import annotations

import math
from collections import Counter

from stages.report.comparison_records import Baselines

ORDERS = (1, 2, 3, 4)
NAMES = {1: "unigram", 2: "bigram", 3: "trigram", 4: "4-gram"}


class KneserNey:
    """An interpolated Kneser-Ney model of ``order`` over token ids ``0..vocab_size-1``."""

    def __init__(self, order: int, vocab_size: int, bos_id: int):
        if order < 1:
            raise ValueError(f"an n-gram model's order is 1 or more, got {order}")
        self.order, self.vocab_size, self.bos_id = order, vocab_size, bos_id
        # Per order k (1..order): n-gram -> count (raw at the top order, continuation below),
        # context -> the sum of its counts, context -> how many tokens follow it, discount.
        self.counts: dict[int, Counter] = {}
        self.totals: dict[int, Counter] = {}
        self.types: dict[int, Counter] = {}
        self.discounts: dict[int, float] = {}

    def fit(self, sentences: list[list[int]]) -> KneserNey:
        """``sentences``: token ids, each ending with EOS (the tokens predicted)."""
        top: Counter = Counter()
        for sentence in sentences:
            padded = [self.bos_id] * (self.order - 1) + list(sentence)
            top.update(tuple(padded[index:index + self.order]) for index in range(len(sentence)))
        self.counts[self.order] = top
        for k in range(self.order - 1, 0, -1):
            # A k-gram's continuation count: the distinct tokens seen before it.
            self.counts[k] = Counter(gram[1:] for gram in self.counts[k + 1])
        for k, counts in self.counts.items():
            totals: Counter = Counter()
            types: Counter = Counter()
            for gram, count in counts.items():
                totals[gram[:-1]] += count
                types[gram[:-1]] += 1
            self.totals[k], self.types[k] = totals, types
            of_counts = Counter(count for count in counts.values() if count <= 2)
            n1, n2 = of_counts[1], of_counts[2]
            self.discounts[k] = n1 / (n1 + 2 * n2) if n1 else 0.5
        return self

    def probability(self, context: tuple[int, ...], token: int) -> float:
        """P(token | the last order-1 tokens of ``context``), interpolated down to uniform."""
        probability = 1.0 / self.vocab_size
        for k in range(1, self.order + 1):
            history = tuple(context[len(context) - (k - 1):]) if k > 1 else ()
            total = self.totals[k].get(history, 0)
            if not total:  # an unseen context: the lower order's estimate stands
                continue
            discount = self.discounts[k]
            probability = (max(self.counts[k].get(history + (token,), 0) - discount, 0.0) / total
                           + discount * self.types[k][history] / total * probability)
        return probability

    def cross_entropy(self, sentences: list[list[int]]) -> float:
        """Mean negative log-likelihood in nats per token of ``sentences`` (each ending with EOS)."""
        nll, tokens = 0.0, 0
        for sentence in sentences:
            padded = [self.bos_id] * (self.order - 1) + list(sentence)
            for index, token in enumerate(sentence):
                nll -= math.log(self.probability(tuple(padded[index:index + self.order - 1]), token))
                tokens += 1
        return nll / max(tokens, 1)


def baselines(train: list[list[int]], valid: list[list[int]], vocab_size: int, bos_id: int,
              orders: tuple[int, ...] = ORDERS) -> Baselines:
    """Per order (as a string, for JSON): the validation split's cross-entropy in nats per
    target token of the Kneser-Ney model fitted on ``train``."""
    found = {str(order): KneserNey(order, vocab_size, bos_id).fit(train).cross_entropy(valid) for order in orders}
    return Baselines(nats_per_token=found, train_sentences=len(train), valid_sentences=len(valid),
                     vocab_size=vocab_size, smoothing="interpolated Kneser-Ney")

