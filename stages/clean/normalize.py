"""Unicode and whitespace normalization applied to every split.

This runs on every sentence of the corpus, so the common case is kept cheap: ASCII
text is already in every normalization form and holds no invisible characters, so it
skips both steps (tests/unit/stages/test_normalize.py checks the result is the same).
"""

from __future__ import annotations

import re
import unicodedata

# Invisible format characters that only get in the way of tokenization. Zero-width
# (non-)joiners are kept: they change how Persian, Indic and emoji text renders.
_INVISIBLE = re.compile("[\u00ad\u200b\u200e\u200f\u2060\ufeff]")
_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f]")


def normalize_text(text: str, unicode_form: str = "NFC") -> str:
    if not text.isascii():
        if unicode_form != "none":
            text = unicodedata.normalize(unicode_form, text)
        text = _INVISIBLE.sub("", text)
    text = _CONTROL.sub(" ", text)
    # str.split() splits on exactly the characters re's \s matches in str patterns
    # (Unicode whitespace: tabs, no-break and thin spaces, line separators).
    return " ".join(text.split())
