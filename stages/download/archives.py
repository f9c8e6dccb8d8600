"""Safe extraction of tar and zip archives.

Every member is checked before anything is written: an absolute path, a ``..``
that climbs out of the target directory, or a link pointing outside it is refused
(the "tar slip" / "zip slip" attack), and the archive is named in the error.
"""

from __future__ import annotations

import os
import shutil
import tarfile
import zipfile
from pathlib import Path

from stages.shared.errors import InputDataError


def is_archive(path: Path) -> bool:
    return tarfile.is_tarfile(path) or zipfile.is_zipfile(path)


def extract_archive(archive: Path, target: Path) -> Path:
    """Extract ``archive`` into ``target`` (once; an extracted copy is reused)."""
    done_marker = target / ".extracted"
    if done_marker.exists():
        return target
    staging = target.with_name(target.name + ".extracting")
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    if tarfile.is_tarfile(archive):
        with tarfile.open(archive) as tar:
            for member in tar.getmembers():
                _refuse_escape(archive, staging, member.name)
                if member.issym() or member.islnk():
                    link_base = staging / Path(member.name).parent if member.issym() else staging
                    _refuse_escape(archive, staging, str(link_base / member.linkname), kind="link target")
            # filter="data" is a second line of defence (device files, permissions).
            tar.extractall(staging, filter="data")
    elif zipfile.is_zipfile(archive):
        with zipfile.ZipFile(archive) as zipped:
            for name in zipped.namelist():
                _refuse_escape(archive, staging, name)
            zipped.extractall(staging)
    else:
        raise InputDataError(f"{archive}: not a tar or zip archive")
    (staging / ".extracted").touch()
    shutil.rmtree(target, ignore_errors=True)
    os.rename(staging, target)
    return target


def _refuse_escape(archive: Path, root: Path, name: str, kind: str = "member") -> None:
    resolved = (root / name).resolve()
    if os.path.isabs(name) and kind == "member" or not resolved.is_relative_to(root.resolve()):
        shutil.rmtree(root, ignore_errors=True)
        raise InputDataError(
            f"{archive}: refusing to extract {kind} {name!r}: its path escapes the target directory"
        )
