"""The training-data filters, applied in order; a pair is counted under the first rule
that removes it, so the per-rule counts add up to the pairs removed."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field

from stages.clean.config import CleanConfig

RULES = ("empty", "too_long", "length_ratio", "identical", "duplicate", "wrong_language")


@dataclass
class PairFilter:
    config: CleanConfig
    src_lang: str
    tgt_lang: str
    removed: dict[str, int] = field(default_factory=lambda: dict.fromkeys(RULES, 0))
    # 16-byte digests instead of the pairs themselves: a 40M-pair corpus fits in ~1.5 GB.
    _seen: set[bytes] = field(default_factory=set)

    def rule_violated(self, src: str, tgt: str) -> str | None:
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
        if config.drop_duplicates:
            digest = hashlib.blake2b(f"{src}\t{tgt}".encode(), digest_size=16).digest()
            if digest in self._seen:
                return "duplicate"
            self._seen.add(digest)
        if config.langid and not (self._is_language(src, self.src_lang) and self._is_language(tgt, self.tgt_lang)):
            return "wrong_language"
        return None

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
