"""Artifact roots on object stores: opening one from its URI, and keeping its secrets out
of everything the pipeline writes or prints.

An ``s3://bucket/prefix`` root takes the usual query options, as pyarrow's own URIs
do: ``endpoint_override`` (``host:port`` of an S3-compatible server such as SeaweedFS
or MinIO), ``scheme`` (``http`` for one without TLS) and ``region``. Credentials come
the standard ways: the AWS environment variables (``AWS_ACCESS_KEY_ID``,
``AWS_SECRET_ACCESS_KEY``, ``AWS_SESSION_TOKEN``), the AWS profile files
(``AWS_PROFILE``), instance metadata, or, least recommended, ``access_key`` and
``secret_key`` in the URI itself (or ``s3://KEY:SECRET@bucket/...``; there a ``/``,
``@``, ``:`` or ``%`` in the key or secret must be percent-encoded, as ``%2F``, ``%40``,
``%3A`` and ``%25``, and a URI that could be read two ways is refused; a ``+`` is read as
written). Buckets are
created when missing, as a local root's directory would be. Any other pyarrow
filesystem URI (``gs://``, ``hdfs://``, ``file://``) is opened by pyarrow.

``redact`` removes credentials from a URI (or from any text holding one): the
artifact root is shown, logged and tracked only in its redacted form.
"""

from __future__ import annotations

import re
from urllib.parse import parse_qsl, unquote, urlsplit

import pyarrow.fs as pafs

SECRET_QUERY_KEYS = ("access_key", "secret_key", "session_token")
# Query options an s3:// root may carry, passed to pyarrow's S3FileSystem.
S3_OPTIONS = ("endpoint_override", "scheme", "region", *SECRET_QUERY_KEYS)
# A URI in any text: from its scheme to the end of the word (a space or a quote).
_URI = re.compile(r"\b[a-z][a-z0-9+.-]*://[^\s'\"]*", re.IGNORECASE)
# Where a query option begins: "?name=" or "&name=", the name as written (maybe %-encoded).
_OPTION = re.compile(r"[?&]([^=&?#\s'\"]*)=")


def redact(text: str) -> str:
    """``text`` with every URI's credentials (user info, secret query options) replaced by ``***``."""
    return _URI.sub(lambda match: _redact_uri(match.group(0)), text)


def _redact_uri(uri: str) -> str:
    """One URI without its credentials, whatever characters they hold, raw or
    percent-encoded. A secret written raw may hold "/", "@", "?", "&" or "=", which the
    URI then cannot parse one way; so the parts are found by what cannot be a secret's:
    the query begins at the first option an s3:// root takes (its name decoded), the
    user info is everything before the last "@" ahead of that, and a secret option's
    value runs to the next such option or the URI's end. At worst a path holding an "@"
    or an option's value is masked too."""
    scheme, rest = uri.split("://", 1)
    options = [(match.start(), match.end(), unquote(match.group(1)).lower()) for match in _OPTION.finditer(rest)]
    known = [option for option in options if option[2] in S3_OPTIONS]
    query = known[0][0] if known else len(rest)
    at = rest.rfind("@", 0, query)
    parts, shown_to = [], 0
    if at >= 0:
        parts.append("***@")
        shown_to = at + 1
    for index, (start, end, name) in enumerate(known):
        if name in SECRET_QUERY_KEYS:
            parts.append(rest[shown_to:end] + "***")
            shown_to = known[index + 1][0] if index + 1 < len(known) else len(rest)
    parts.append(rest[shown_to:])
    return f"{scheme}://{''.join(parts)}"


def open_filesystem(uri: str) -> tuple[pafs.FileSystem, str]:
    """The filesystem a root URI names and the root's path on it."""
    parts = urlsplit(uri)
    if parts.scheme != "s3":
        return pafs.FileSystem.from_uri(uri)
    # A "+" is read as written, not as a space (form encoding's rule, which parse_qsl
    # follows): AWS secrets often hold one, and a URI's query is no form.
    options = dict(parse_qsl(parts.query.replace("+", "%2B")))
    unknown = sorted(set(options) - set(S3_OPTIONS))
    if unknown:
        raise ValueError(f"artifact root {redact(uri)}: unknown option(s) {', '.join(unknown)}; "
                         f"an s3:// root takes {', '.join(S3_OPTIONS)}")
    key, secret = _credentials(uri)
    if key is not None:
        options.setdefault("access_key", key)
        options.setdefault("secret_key", secret)
    bucket = parts.hostname or ""
    if len(bucket) < 3:
        raise ValueError(f"artifact root {redact(uri)}: {bucket!r} is not a valid bucket name "
                         "(S3 bucket names have 3 to 63 characters)")
    options.setdefault("region", "us-east-1")
    filesystem = pafs.S3FileSystem(allow_bucket_creation=True, **options)
    return filesystem, f"{bucket}{parts.path}".rstrip("/")


def _credentials(uri: str) -> tuple[str | None, str]:
    """(key, secret) written as ``s3://KEY:SECRET@bucket``, percent-decoded; (None, '')
    when there are none. Raises ``ValueError`` (naming the rule, never the secret) for a
    URI whose credentials could be read more than one way: an "@" that is not the
    authority's only one, or one after the first "/" (a raw "/" in the secret)."""
    rest = uri.split("://", 1)[1]
    end = min((rest.index(c) for c in "/?#" if c in rest), default=len(rest))
    authority, after = rest[:end], rest[end:]
    rule = ("credentials in an s3:// URI must percent-encode '/', '@', ':' and '%' (as %2F, %40, %3A, %25); "
            "better, leave them out and set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY")
    if authority.count("@") > 1 or ("@" in after.split("?", 1)[0] and ":" in authority):
        raise ValueError(f"artifact root {redact(uri)}: can be read more than one way: {rule}")
    if "@" not in authority:
        return None, ""
    userinfo = authority.rsplit("@", 1)[0]
    key, _, secret = userinfo.partition(":")
    return unquote(key), unquote(secret)
