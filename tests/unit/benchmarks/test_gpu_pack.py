"""benchmarks/gpu/gpu_pack.py: what is packed for the offline GPU machine, and whether each
call of the campaign fits what one call may carry."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from benchmarks.gpu import gpu_pack
from tests.helpers import REPO

pytestmark = pytest.mark.trains  # imports the slimmed Ray in a process of its own

PYTHON = f"{sys.version_info[0]}.{sys.version_info[1]}"


def test_the_closure_follows_requirements_but_leaves_out_the_image_and_what_it_skips():
    packed = gpu_pack.closure(["fastapi"], skip={"starlette", "typing-extensions"}, python_version=PYTHON)
    assert "fastapi" in packed and "pydantic" in packed and "pydantic-core" in packed
    assert "starlette" not in packed and "typing-extensions" not in packed
    assert packed["pydantic"] == __import__("importlib.metadata").metadata.version("pydantic")


def test_requirements_of_an_extra_are_packed_only_where_the_extra_is_named():
    plain = gpu_pack.closure(["ray"], skip=set(), python_version=PYTHON)
    with_default = gpu_pack.closure(["ray[default]"], skip=set(), python_version=PYTHON)
    assert "aiohttp-cors" not in plain
    assert "aiohttp-cors" in with_default


def test_an_image_package_too_old_for_what_requires_it_is_packed_to_shadow_it():
    # grpcio-reflection 1.85 refused to import beside an image's grpcio 1.84.
    needed = __import__("importlib.metadata").metadata.version("grpcio")
    packed = gpu_pack.closure(["grpcio-reflection"], skip={"grpcio", "protobuf"}, python_version=PYTHON,
                              image={"grpcio": "1.0.0", "protobuf": None})
    assert packed.get("grpcio") == needed
    assert "protobuf" not in packed  # unpinned in the image: trusted
    recent = gpu_pack.closure(["grpcio-reflection"], skip={"grpcio", "protobuf"}, python_version=PYTHON,
                              image={"grpcio": needed, "protobuf": None})
    assert "grpcio" not in recent


def test_base_packs_what_the_image_lacks_and_of_what_it_has_only_what_is_too_old():
    parts = gpu_pack.part_pins(PYTHON)
    image = gpu_pack.image_versions()
    assert {"deepspeed", "pydantic", "mlflow-skinny", "sqlalchemy"} <= set(parts["base"])
    shadowed = set(image) & set(parts["base"])
    assert all(image[name] is not None for name in shadowed), shadowed
    assert "torch" not in parts["base"] and parts["ray"] == {"ray": parts["ray"]["ray"]}


def test_a_call_over_the_limit_is_refused_naming_the_call_and_its_parts():
    sizes = {"base": 10 * gpu_pack.MIB, "ray": 30 * gpu_pack.MIB, "ctranslate2": 52 * gpu_pack.MIB,
             "data": 2 * gpu_pack.MIB}
    limit = 64 * gpu_pack.MIB
    rows = gpu_pack.call_sizes(sizes, repository=2 * gpu_pack.MIB, limit=limit)
    assert {row["call"]: row["fits"] for row in rows} == {"product": True, "wu": True, "engine": True, "bench": False}
    with pytest.raises(SystemExit, match=r"call 'bench' \(base \+ ctranslate2 \+ data\): 66.0 MiB"):
        gpu_pack.check_fits(rows, limit)
    gpu_pack.check_fits([row for row in rows if row["fits"]], limit)  # the others pass
    # No limit given: sizes reported, nothing refused.
    assert all(row["fits"] is None for row in gpu_pack.call_sizes(sizes, repository=2 * gpu_pack.MIB))


def test_slimming_removes_jars_and_rllib_and_leaves_a_dashboard_folder(tmp_path):
    for relative in ("ray/jars/ray_dist.jar", "ray/rllib/algorithm.py", "ray/dashboard/client/build/main.js",
                     "ray/train/torch/__init__.py"):
        (tmp_path / relative).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / relative).write_text("x")
    removed = gpu_pack.slim_ray(tmp_path)
    assert set(removed) == {"ray/jars", "ray/rllib", "ray/dashboard/client/build"}
    assert (tmp_path / "ray/train/torch/__init__.py").is_file()
    # The dashboard's backend refuses to start without this folder.
    assert (tmp_path / "ray/dashboard/client/build/static").is_dir()
    assert not (tmp_path / "ray/dashboard/client/build/main.js").exists()


@pytest.mark.slow
def test_the_slimmed_ray_imports_ray_train_and_serve(tmp_path):
    """The packed Ray, unpacked alone on the path before the installed one: Ray Train's
    torch integration and Ray Serve import from it."""
    wheels, site = tmp_path / "wheels", tmp_path / "site"
    wheels.mkdir()
    gpu_pack.fetch_wheels({"ray": gpu_pack.metadata.version("ray")}, PYTHON, wheels)
    gpu_pack.install_tree(wheels, PYTHON, site)
    gpu_pack.slim_ray(site)
    assert not (site / "ray/jars").exists()
    code = "import ray, ray.train.torch, ray.serve; print(ray.__file__)"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(site), str(REPO)])}
    imported = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert imported.returncode == 0, imported.stderr
    assert imported.stdout.strip().startswith(str(site))
