"""The training-data filters, applied in order; a pair is counted under the first rule
that removes it, so the per-rule counts add up to the pairs removed.

Every rule but ``duplicate`` looks at one pair alone (``local_rule`` and
``wrong_language``), so any task can apply them to any slice of the corpus.
``duplicate`` needs the whole corpus: ``PairFilter`` keeps a set of digests in one
process, which is the rule's definition; the clean stage applies it to a sharded
corpus by hash-partitioning the digests (``stages/clean/train_split.py``).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field

from stages.clean.config import CleanConfig

RULES = ("empty", "too_long", "length_ratio", "identical", "duplicate", "wrong_language")


def pair_digest(src: str, tgt: str) -> bytes:
    """16 bytes that stand for the pair: a 40M-pair corpus's digests fit in ~1.5 GB."""
    return hashlib.blake2b(f"{src}\t{tgt}".encode(), digest_size=16).digest()


@dataclass
class PairFilter:
    config: CleanConfig
    src_lang: str
    tgt_lang: str
    removed: dict[str, int] = field(default_factory=lambda: dict.fromkeys(RULES, 0))
    _seen: set[bytes] = field(default_factory=set)

    def local_rule(self, src: str, tgt: str) -> str | None:
        """The first of the rules before ``duplicate`` that the pair breaks, if any."""
        config = self.config
        src_words, tgt_words = len(src.split()), len(tgt.split())
        if min(src_words, tgt_words) < max(config.min_words, 1):
            return "empty"
        if max(src_words, tgt_words) > config.max_words or max(len(src), len(tgt)) > config.max_chars:
            return "too_long"
        if max(src_words, tgt_words) / min(src_words, tgt_words) > config.max_length_ratio:
            return "length_ratio"
        if config.drop_identical and src == tgt:
            return "identical"
        return None

    def wrong_language(self, src: str, tgt: str) -> bool:
        return self.config.langid and not (self._is_language(src, self.src_lang)
                                           and self._is_language(tgt, self.tgt_lang))

    def rule_violated(self, src: str, tgt: str) -> str | None:
        """Every rule in order, ``duplicate`` against the pairs seen by this filter."""
        rule = self.local_rule(src, tgt)
        if rule is not None:
            return rule
        if self.config.drop_duplicates:
            digest = pair_digest(src, tgt)
            if digest in self._seen:
                return "duplicate"
            self._seen.add(digest)
        return "wrong_language" if self.wrong_language(src, tgt) else None

    def keep(self, src: str, tgt: str) -> bool:
        rule = self.rule_violated(src, tgt)
        if rule is not None:
            self.removed[rule] += 1
        return rule is None

    def _is_language(self, text: str, language: str) -> bool:
        # Short strings are classified unreliably; they pass rather than being dropped.
        if len(text) < self.config.langid_min_chars:
            return True
        import py3langid  # ships its model; loaded once, on first use

        detected, _ = py3langid.classify(text)
        return detected == language
