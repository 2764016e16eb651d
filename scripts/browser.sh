#!/usr/bin/env bash
# Install what the console's browser tests drive (tests/browser): Debian's chromium and
# its chromedriver, from the distribution's packages (no browser download of its own).
# Idempotent: nothing is done when both are there.
set -euo pipefail

if command -v chromium >/dev/null 2>&1 && command -v chromedriver >/dev/null 2>&1; then
  echo "browser: chromium and chromedriver are installed"
  exit 0
fi
if [ "$(id -u)" -ne 0 ]; then
  echo "browser: chromium or chromedriver is missing; as root: apt-get install chromium chromium-driver" >&2
  exit 1
fi
echo "browser: installing chromium and chromium-driver"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq chromium chromium-driver >/dev/null
echo "browser: $(chromium --version 2>/dev/null || echo chromium installed)"
