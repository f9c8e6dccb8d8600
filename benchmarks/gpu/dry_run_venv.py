"""The CPU dry run's virtual environment: the GPU image's packages and nothing else.

``benchmarks/gpu/gpu_image_packages.txt`` lists what the GPU image holds (torch: here its
CPU wheel, 2.13.0). A listed package that this Python already has installed, at a
version the list allows, is linked into the environment from that installation (hard
links, or copies across filesystems): seconds, where pip takes minutes to unpack torch,
pyarrow, transformers and the rest again. The others (pinned to another version than
the one installed here, or not installed) are installed by pip at the listed version.
Nothing is installed for a package's requirements: the image has only what the list
names, so a packed part that forgets one fails here, as it would on the GPU node.

    python benchmarks/gpu/dry_run_venv.py VENV
"""

from __future__ import annotations

import argparse
import importlib.metadata as metadata
import os
import shutil
import subprocess
import sys
import venv
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from gpu_pack import image_requirements  # noqa: E402  (run as a script: benchmarks/ is on the path)

# The image's torch is CUDA's build; the CPU dry run stands in the CPU wheel of the version we pin.
TORCH = Requirement("torch==2.13.0")


def listed() -> list[Requirement]:
    return [TORCH if r.name == "torch" and not r.specifier else r for r in image_requirements()]


def installed_here(requirement: Requirement) -> metadata.Distribution | None:
    """This Python's distribution of ``requirement`` if its version is allowed and its
    files are recorded; else None (pip installs it)."""
    try:
        distribution = metadata.distribution(requirement.name)
    except metadata.PackageNotFoundError:
        return None
    if not requirement.specifier.contains(distribution.version, prereleases=True) or not distribution.files:
        return None
    return distribution


def link(distribution: metadata.Distribution, site: Path) -> None:
    """The distribution's files under ``site``, as they sit in this Python's
    site-packages; files recorded outside it (console scripts) are left out."""
    for recorded in distribution.files:
        if recorded.parts and recorded.parts[0] == "..":
            continue
        source = Path(distribution.locate_file(recorded))
        if not source.is_file():
            continue
        target = site / recorded
        target.parent.mkdir(parents=True, exist_ok=True)
        try:
            os.link(source, target)
        except FileExistsError:
            continue
        except OSError:  # another filesystem
            shutil.copy2(source, target)


def site_packages(python: Path) -> Path:
    return Path(subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                               check=True, capture_output=True, text=True).stdout.strip())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("venv", type=Path)
    args = parser.parse_args(argv)
    venv.create(args.venv, clear=True, with_pip=True)
    python = args.venv / "bin" / "python"
    site = site_packages(python)
    # What venv's own pip install brought (pip, and setuptools before Python 3.12) stays.
    present = {canonicalize_name(path.name.split("-")[0]) for path in site.glob("*.dist-info")}
    linked, to_install = [], []
    for requirement in listed():
        if canonicalize_name(requirement.name) in present:
            continue
        distribution = installed_here(requirement)
        if distribution is None:
            to_install.append(str(requirement))
        else:
            link(distribution, site)
            linked.append(f"{canonicalize_name(requirement.name)}=={distribution.version}")
    print(f"linked from this installation: {len(linked)} packages; installing with pip: "
          f"{' '.join(to_install) or 'none'}", flush=True)
    if to_install:
        subprocess.run([str(python), "-m", "pip", "install", "-q", "--disable-pip-version-check", "--no-deps",
                        *to_install], check=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
