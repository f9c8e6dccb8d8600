"""Unicode and whitespace normalization applied to every split."""

from __future__ import annotations

import re
import unicodedata

# Invisible format characters that only get in the way of tokenization. Zero-width
# (non-)joiners are kept: they change how Persian, Indic and emoji text renders.
_INVISIBLE = dict.fromkeys(map(ord, "\u00ad\u200b\u200e\u200f\u2060\ufeff"))
_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f]")
# \s in Python's re is Unicode-aware: tabs, no-break and thin spaces, line separators.
_WHITESPACE = re.compile(r"\s+")


def normalize_text(text: str, unicode_form: str = "NFC") -> str:
    if unicode_form != "none":
        text = unicodedata.normalize(unicode_form, text)
    text = _CONTROL.sub(" ", text.translate(_INVISIBLE))
    return _WHITESPACE.sub(" ", text).strip()
