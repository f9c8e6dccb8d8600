"""Turn a ``FileRef`` from the config into a verified local file.

Order of search for a URL pinned by sha256: the download cache (content-addressed,
shared by all runs), then each mirror directory (a file with the URL's basename and
the right digest), then the network. With no network and no mirror the error says
exactly which file to put where.
"""

from __future__ import annotations

from pathlib import Path

from pipeline.core.artifacts import file_sha256
from stages.download.archives import extract_archive, is_archive
from stages.download.config import FileRef
from stages.download.http import DownloadError, fetch_url
from stages.shared.errors import InputDataError


def locate_file(ref: FileRef, mirrors: list[str], download_cache: Path, progress) -> Path:
    if ref.path is not None:
        path = Path(ref.path)
        if not path.is_file():
            raise InputDataError(f"{path}: input file not found")
        if ref.sha256 is not None and file_sha256(path) != ref.sha256:
            raise InputDataError(f"{path}: sha256 does not match the one pinned in the config")
    else:
        path = _fetch_pinned(ref, mirrors, download_cache, progress)
    if ref.member is None:
        return path
    if not is_archive(path):
        raise InputDataError(f"{path}: 'member' {ref.member!r} given, but the file is not a tar or zip archive")
    extracted = extract_archive(path, download_cache / "extracted" / (ref.sha256 or _path_id(path)))
    member = extracted / ref.member
    if not member.is_file():
        raise InputDataError(f"{ref.url or ref.path}: archive has no member {ref.member!r}")
    return member


def _fetch_pinned(ref: FileRef, mirrors: list[str], download_cache: Path, progress) -> Path:
    cached = download_cache / ref.sha256 / ref.filename
    if cached.is_file():
        return cached
    for mirror in mirrors:
        candidate = Path(mirror) / ref.filename
        if candidate.is_file() and file_sha256(candidate) == ref.sha256:
            # Used in place: copying a large mirror file would only cost time and disk.
            return candidate
    try:
        return fetch_url(ref.url, cached, ref.sha256, progress)
    except DownloadError as error:
        if "checksum mismatch" in str(error):
            raise
        searched = ", ".join(mirrors) if mirrors else "none configured"
        raise DownloadError(
            f"{error}\nTo run offline, put {ref.filename!r} (sha256 {ref.sha256}) in a mirror directory "
            f"and name it with NMT_MIRROR=/that/dir (colon-separated for several) or the config's "
            f"'mirrors' list. Mirrors searched: {searched}."
        ) from None


def _path_id(path: Path) -> str:
    stat = path.stat()
    return f"{path.name}-{stat.st_size}-{stat.st_mtime_ns}"
