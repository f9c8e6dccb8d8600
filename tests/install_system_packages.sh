#!/usr/bin/env bash
# What some tests need besides the Python packages, from Debian: Chromium for the browser
# test (tests/e2e/test_attention_page.py), driven by Playwright's Python client (which
# only drives it: no browser download), HAProxy for the service behind
# `nmt serve --ingress haproxy` (tests/e2e/test_serve.py), Slurm and MUNGE for the
# one-machine Slurm cluster (tests/slurm_cluster.py), and OpenSSH's server for
# `ray up` over SSH (tests/e2e/test_ray_up.py). Run as root, or with sudo rights;
# skipped parts already present.
set -euo pipefail
missing=()
command -v chromium >/dev/null || missing+=(chromium)
command -v haproxy >/dev/null || missing+=(haproxy)
command -v slurmctld >/dev/null || missing+=(slurmctld)
command -v slurmd >/dev/null || missing+=(slurmd)
command -v sbatch >/dev/null || missing+=(slurm-client)
command -v munged >/dev/null || missing+=(munge)
command -v /usr/sbin/sshd >/dev/null || missing+=(openssh-server)
command -v rsync >/dev/null || missing+=(rsync)  # ray up copies files to the nodes with it
if [ ${#missing[@]} -gt 0 ]; then
    sudo_=""
    [ "$(id -u)" -ne 0 ] && sudo_="sudo"
    $sudo_ apt-get update -qq
    $sudo_ apt-get install -y -qq "${missing[@]}" >/dev/null
fi
python3 -m pip install --quiet --disable-pip-version-check "playwright>=1.40"
