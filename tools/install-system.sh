#!/bin/sh
# Installs the Debian packages the tests start themselves: chromium (the live view's browser
# test, tests/test_web_browser.py, driven by Playwright from the venv: no browser download by
# Playwright) and redis-server (the Redis Streams connector's tests, tests/redisserver.py).
# Idempotent: installs only what is missing. Needs root (or sudo) to install.
set -eu
missing=""
[ -x /usr/bin/chromium ] || missing="$missing chromium"
command -v redis-server >/dev/null 2>&1 || missing="$missing redis-server"
# `ip` makes the network namespaces of the multi-host Spark tests (tests/test_spark_hosts.py)
command -v ip >/dev/null 2>&1 || [ -x /usr/sbin/ip ] || [ -x /sbin/ip ] || missing="$missing iproute2"
if [ -z "$missing" ]; then
    echo "system packages: $(/usr/bin/chromium --version 2>/dev/null || echo chromium), $(redis-server --version | cut -d' ' -f1-3)"
    exit 0
fi
if ! command -v apt-get >/dev/null 2>&1; then
    echo "install-system.sh: no apt-get here; install:$missing" >&2
    exit 1
fi
SUDO=""
if [ "$(id -u)" -ne 0 ]; then
    if command -v sudo >/dev/null 2>&1; then SUDO="sudo"; else
        echo "install-system.sh: run as root (apt-get install$missing)" >&2
        exit 1
    fi
fi
$SUDO apt-get update -qq
# shellcheck disable=SC2086 # one word per package
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends $missing >/dev/null
echo "installed:$missing"
