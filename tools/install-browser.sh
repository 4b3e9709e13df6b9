#!/bin/sh
# Installs the headless browser of the live view's end-to-end test (tests/test_web_browser.py):
# Debian's chromium, driven by Playwright from the venv (no browser download by Playwright).
# Idempotent: does nothing when /usr/bin/chromium is there. Needs root (or sudo) to install.
set -eu
if [ -x /usr/bin/chromium ]; then
    echo "chromium: $(/usr/bin/chromium --version 2>/dev/null || echo present) at /usr/bin/chromium"
    exit 0
fi
if ! command -v apt-get >/dev/null 2>&1; then
    echo "install-browser.sh: no apt-get here; install chromium so that /usr/bin/chromium exists" >&2
    exit 1
fi
SUDO=""
if [ "$(id -u)" -ne 0 ]; then
    if command -v sudo >/dev/null 2>&1; then SUDO="sudo"; else
        echo "install-browser.sh: run as root (apt-get install chromium)" >&2
        exit 1
    fi
fi
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends chromium >/dev/null
/usr/bin/chromium --version
