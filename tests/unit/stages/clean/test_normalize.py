"""The fast normalization gives exactly what the plain one gives, on every character."""

from __future__ import annotations

import random
import re
import unicodedata

import pytest

from stages.clean.normalize import normalize_text

INVISIBLE = dict.fromkeys(map(ord, "\u00ad\u200b\u200e\u200f\u2060\ufeff"))
CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f]")
WHITESPACE = re.compile(r"\s+")


def plain_normalize(text: str, unicode_form: str) -> str:
    """The definition: normalize, drop invisible characters, controls to spaces, collapse \\s."""
    if unicode_form != "none":
        text = unicodedata.normalize(unicode_form, text)
    text = CONTROL.sub(" ", text.translate(INVISIBLE))
    return WHITESPACE.sub(" ", text).strip()


@pytest.mark.parametrize("unicode_form", ["NFC", "NFKC", "none"])
def test_fast_normalize_equals_the_plain_definition(unicode_form):
    rng = random.Random(0)
    # Every code point below U+3100 and the odd ones above, each alone and in mixed strings.
    alphabet = [chr(c) for c in range(0x3100) if not 0xD800 <= c < 0xE000]
    alphabet += ["\ufeff", "\ufb01", "\u3000", "\uff21", "e\u0301", "\u200d"]
    texts = alphabet + ["".join(rng.choices(alphabet + [" ", "a", "b"] * 50, k=rng.randint(0, 40)))
                        for _ in range(20_000)]
    assert [normalize_text(t, unicode_form) for t in texts] == [plain_normalize(t, unicode_form) for t in texts]
