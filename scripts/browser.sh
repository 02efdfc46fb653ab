#!/usr/bin/env bash
# Debian's Chromium for tests/docs/test_docs_browser.py, which Playwright drives: Playwright's
# own browser download cannot reach its host from CI. DejaVu is the font the docs' widths were
# measured in (the theme's system-ui resolves to it here); installed by name, not by chance.
# Does nothing when both are there; refreshes the package lists only when the install fails.
set -euo pipefail
packages=(chromium fonts-dejavu-core)
if [ -x /usr/bin/chromium ] && dpkg -s fonts-dejavu-core >/dev/null 2>&1; then
    exit 0
fi
echo "[browser] installing ${packages[*]}"
install() { DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${packages[@]}" >/dev/null 2>&1; }
if ! install; then
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${packages[@]}" >/dev/null
fi
echo "[browser] $(/usr/bin/chromium --version 2>/dev/null)"
