#!/usr/bin/env bash
# Builds promptcache and runs the demo on stories260K (../shared/models): the same greedy
# generation with and without the KV cache, and how long each took.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build --target promptcache
model=${1:-../shared/models/stories260K.gguf}
prompt="Once upon a time"
n=200

run() {  # run FLAGS...: prints the text, returns the generation time in ms in $ms
  local log
  log=$(mktemp)
  ./build/promptcache run -m "$model" -p "$prompt" -n $n --temp 0 --ignore-eos "$@" 2>"$log"
  ms=$(sed -n 's/^generation: .* in \([0-9.]*\) ms.*/\1/p' "$log")
  grep -E "^(prompt|generation):" "$log" | sed 's/^/  /'
  rm -f "$log"
}

echo "== with the KV cache: each new token costs one token of work"
run
with=$ms
echo
echo "== without it (--no-kv-cache): every new token recomputes the whole sequence"
run --no-kv-cache
without=$ms
echo
awk -v a="$with" -v b="$without" -v n=$n 'BEGIN {
  printf "%d tokens: %.1f ms with the KV cache, %.1f ms without: %.1fx faster with it\n", n, a, b, b / a }'
