#!/usr/bin/env bash
# Installs nmt-pipeline and its dependencies into the current Python environment.
# Used by the README, by .ci/run and by the Ray cluster's setup_commands, so every
# machine gets the same install.
#
# The order matters: torch first, pinned, then DeepSpeed, which compiles against the
# installed torch and so needs --no-build-isolation.
#
# Which torch: a torch 2.13.0 already installed is kept (a cluster image's CUDA build, a
# CPU build installed by hand). Otherwise, on a machine with an NVIDIA driver
# (nvidia-smi), PyPI's build, which is CUDA's; on one without, the CPU build from
# PyTorch's CPU index (NMT_TORCH_CPU_INDEX), which pip prefers to PyPI's multi-gigabyte
# CUDA build of the same version. Where that index does not answer (offline), whatever
# index or wheel directory pip is configured with serves the pin.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
pip=(python3 -m pip install --quiet --disable-pip-version-check)
torch_pin="torch==2.13.0"
if python3 -c 'import sys, torch; sys.exit(torch.__version__.split("+")[0] != "2.13.0")' 2>/dev/null; then
    echo "install.sh: keeping the installed torch $(python3 -c 'import torch; print(torch.__version__)')"
elif command -v nvidia-smi >/dev/null 2>&1; then
    "${pip[@]}" "${torch_pin}"
else
    cpu_index="${NMT_TORCH_CPU_INDEX:-https://download.pytorch.org/whl/cpu}"
    if python3 -c 'import sys, urllib.request; urllib.request.urlopen(sys.argv[1], timeout=10)' "${cpu_index}/torch/" \
            2>/dev/null; then
        "${pip[@]}" "${torch_pin}" --extra-index-url "${cpu_index}"
    else  # offline: pip's own index or wheel directory decides (each package would retry the index)
        echo "install.sh: ${cpu_index} does not answer; torch ${torch_pin#torch==} from pip's configured index"
        "${pip[@]}" "${torch_pin}"
    fi
fi
"${pip[@]}" --no-build-isolation "deepspeed>=0.15"
"${pip[@]}" -e "${here}[dev]"
