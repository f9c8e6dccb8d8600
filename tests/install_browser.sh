#!/usr/bin/env bash
# What the browser test (tests/e2e/test_attention_page.py) needs besides the package:
# Debian's Chromium, driven by Playwright's Python client (which only drives it: no
# browser download). Run as root, or with sudo rights; skipped parts already present.
set -euo pipefail
if ! command -v chromium >/dev/null; then
    sudo_=""
    [ "$(id -u)" -ne 0 ] && sudo_="sudo"
    $sudo_ apt-get update -qq
    $sudo_ apt-get install -y -qq chromium >/dev/null
fi
python3 -m pip install --quiet --disable-pip-version-check "playwright>=1.40"
