"""Artifact roots on object stores: opening one from its URI, and keeping its secrets out
of everything the pipeline writes or prints.

An ``s3://bucket/prefix`` root takes the usual query options, as pyarrow's own URIs
do: ``endpoint_override`` (``host:port`` of an S3-compatible server such as SeaweedFS
or MinIO), ``scheme`` (``http`` for one without TLS) and ``region``. Credentials come
the standard ways: the AWS environment variables (``AWS_ACCESS_KEY_ID``,
``AWS_SECRET_ACCESS_KEY``, ``AWS_SESSION_TOKEN``), the AWS profile files
(``AWS_PROFILE``), instance metadata, or, least recommended, ``access_key`` and
``secret_key`` in the URI itself (or ``s3://KEY:SECRET@bucket/...``). Buckets are
created when missing, as a local root's directory would be. Any other pyarrow
filesystem URI (``gs://``, ``hdfs://``, ``file://``) is opened by pyarrow.

``redact`` removes credentials from a URI (or from any text holding one): the
artifact root is shown, logged and tracked only in its redacted form.
"""

from __future__ import annotations

import re
from urllib.parse import parse_qsl, urlsplit

import pyarrow.fs as pafs

SECRET_QUERY_KEYS = ("access_key", "secret_key", "session_token")
# Query options an s3:// root may carry, passed to pyarrow's S3FileSystem.
S3_OPTIONS = ("endpoint_override", "scheme", "region", *SECRET_QUERY_KEYS)
_USERINFO = re.compile(r"(?P<scheme>\b[a-z][a-z0-9+.-]*://)[^/@\s?#]+@", re.IGNORECASE)
_SECRET_QUERY = re.compile(rf"(?P<key>[?&](?:{'|'.join(SECRET_QUERY_KEYS)})=)[^&\s#'\"]*", re.IGNORECASE)


def redact(text: str) -> str:
    """``text`` with every URI's credentials (user info, secret query options) replaced by ``***``."""
    text = _USERINFO.sub(r"\g<scheme>***@", text)
    return _SECRET_QUERY.sub(r"\g<key>***", text)


def open_filesystem(uri: str) -> tuple[pafs.FileSystem, str]:
    """The filesystem a root URI names and the root's path on it."""
    parts = urlsplit(uri)
    if parts.scheme != "s3":
        return pafs.FileSystem.from_uri(uri)
    options = dict(parse_qsl(parts.query))
    unknown = sorted(set(options) - set(S3_OPTIONS))
    if unknown:
        raise ValueError(f"artifact root {redact(uri)}: unknown option(s) {', '.join(unknown)}; "
                         f"an s3:// root takes {', '.join(S3_OPTIONS)}")
    if parts.username:
        options.setdefault("access_key", parts.username)
        options.setdefault("secret_key", parts.password or "")
    bucket = parts.hostname or ""
    if len(bucket) < 3:
        raise ValueError(f"artifact root {redact(uri)}: {bucket!r} is not a valid bucket name "
                         "(S3 bucket names have 3 to 63 characters)")
    options.setdefault("region", "us-east-1")
    filesystem = pafs.S3FileSystem(allow_bucket_creation=True, **options)
    return filesystem, f"{bucket}{parts.path}".rstrip("/")
