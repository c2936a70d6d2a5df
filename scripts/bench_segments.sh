#!/usr/bin/env bash
# The segment cache's RAG benchmark (issue 33; docs/modules.md "Segments"): a 200-token system
# prompt, 16 documents of 300 tokens, each request the system prompt + 4 documents in random
# order + a 20-token question, 64 requests, on the SmolLM2-135M shape in Q8_0 (random weights,
# GPT-2 vocabulary: `promptcache synth`), 2 threads. Time to the first token (mean, p95) for the
# full recompute, the prefix cache alone, and segments at recompute 0, 5, 15, 30%; segment hit
# rate; K/V bytes the cache holds at the end.
# Usage: [REQUESTS=64] scripts/bench_segments.sh [BIN] [MODEL] [extra eval-segments flags...]
set -euo pipefail
cd "$(dirname "$0")/.."
bin=${1:-./build/promptcache}
model=${2:-/tmp/pc_smollm2-135m-q8_0.gguf}
shift $(( $# > 2 ? 2 : $# ))
vocab=${PC_SHARED_DIR:-../shared}/tokenizers/ggml-vocab-gpt-2.gguf
[ -f "$model" ] || "$bin" synth --preset smollm2-135m --vocab "$vocab" --type q8_0 -o "$model" >&2
exec "$bin" eval-segments -m "$model" -t 2 --synthetic --system-tokens 200 --docs 16 \
  --doc-tokens 300 --question-tokens 20 -k 4 --requests "${REQUESTS:-64}" --baselines --no-fidelity \
  --recompute 0,0.05,0.15,0.3 --encoding in-context "$@"
