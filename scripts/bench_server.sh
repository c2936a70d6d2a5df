#!/usr/bin/env bash
# Server benchmarks of issue 3 ("Speed"; results in docs/benchmarks.md, "Prefix cache and
# server"): starts `promptcache serve` on a loopback port for each scenario, drives it with the
# official OpenAI client (tests/node/bench/bench_server.mjs), stops it, and prints a table.
#
#   (bench) `promptcache bench -p 3300`: the prefill rate that predicts a cold 3,300-token prompt
#   (a) a 3,300-token prompt cold, then the same prefix with a different 10-token ending (warm)
#   (b) 8 clients sharing a 1,000-token system prompt: all at once (--parallel 8) vs one at a time
#   (c) the 3,300-token prompts filled into a --cache-dir, the server restarted, the same prefixes
#       with new endings: time to first token with the prefix loaded from the disk tier
#   (w) not run by default: warm time to first token after 3,280 cached tokens for 1..32 new ones
#
# Usage: scripts/bench_server.sh [-m MODEL] [-b BINARY] [-t THREADS] [-r REPEAT] [-p PORT]
#                                [-n ANSWER_TOKENS] [-o RESULTS.jsonl] [-s SCENARIOS] [-i ISA]
#   defaults: /work/models/smollm2-135m-q8_0.gguf, build/promptcache, 2 threads, 3 repetitions,
#   port 18090, 32 tokens per answer in (b), SCENARIOS "bench a b c", ISA (`--isa`: the
#   kernels' instruction set) the best this CPU has. Medians over the repetitions are printed.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)

model=/work/models/smollm2-135m-q8_0.gguf
bin=${PROMPTCACHE_BIN:-build/promptcache}
threads=2
repeat=3
port=18090
results=""
scenarios="bench a b c"
answer=32
isa=()
while getopts "m:b:t:r:p:n:o:s:i:h" opt; do
  case $opt in
    m) model=$OPTARG ;;
    b) bin=$OPTARG ;;
    t) threads=$OPTARG ;;
    r) repeat=$OPTARG ;;
    p) port=$OPTARG ;;
    n) answer=$OPTARG ;;
    o) results=$OPTARG ;;
    s) scenarios=$OPTARG ;;
    i) isa=(--isa "$OPTARG") ;;
    *) sed -n '2,17p' "$0"; exit 2 ;;
  esac
done
[ -x "$bin" ] || { echo "bench_server: no binary at $bin (build it, or pass -b)" >&2; exit 1; }
[ -f "$model" ] || {
  echo "bench_server: no model at $model; make it with:" >&2
  echo "  $bin synth --preset smollm2-135m --vocab /work/shared/tokenizers/ggml-vocab-gpt-2.gguf --type q8_0 -o $model" >&2
  exit 1
}
[ -d tests/node/node_modules/openai ] || { echo "bench_server: run scripts/setup.sh (npm client)" >&2; exit 1; }

source scripts/bench_lib.sh
bench_setup bench_server

url=http://127.0.0.1:$port
# Starts the server with extra flags and waits for its "listening on" line (it loads a schema
# cache or the model first).
start_server() {
  "$bin" serve -m "$model" -t "$threads" "${isa[@]}" --host 127.0.0.1 --port "$port" "$@" 2>"$work/server.log" &
  server_pid=$!
  wait_server "the server" 600 grep -q "listening on" "$work/server.log"
}
client() { node tests/node/bench/bench_server.mjs "$@" --repeat "$repeat" >>"$results"; }

echo "machine: $(machine)" >&2
echo "model: $model, $threads threads, kernels ${isa[1]:-the best}, $repeat repetitions; load average before: $(load)" >&2

for s in $scenarios; do
  echo "== $s (load $(load))" >&2
  case $s in
    bench)
      "$bin" bench -m "$model" -t "$threads" "${isa[@]}" -p 3300 -n 16 -r "$repeat" --json 2>/dev/null |
        tail -1 | node -e '
          const b = JSON.parse(require("fs").readFileSync(0, "utf8"));
          console.log(JSON.stringify({ scenario: "bench", prefix: 3290, ending: 10,
            prompt_tps: b.prompt_tps, gen_tps: b.gen_tps, repetitions: b.repetitions }));' >>"$results"
      ;;
    a)
      start_server --parallel 1
      client prefix "$url"
      stop_server
      ;;
    b)
      start_server --parallel 8
      client concurrent "$url" --clients 8 --system 1000 --question 16 --gen "$answer"
      stop_server
      ;;
    w)
      start_server --parallel 1
      client sweep "$url" --prefix 3290
      stop_server
      ;;
    c)
      mkdir -p "$work/cache"
      start_server --cache-dir "$work/cache"
      client fill "$url" --seed 7
      stop_server  # writes the RAM cache to the disk tier
      echo "   disk tier: $(du -sh "$work/cache" | cut -f1)" >&2
      start_server --cache-dir "$work/cache"
      client hit "$url" --seed 7
      stop_server
      ;;
    *) echo "bench_server: unknown scenario '$s'" >&2; exit 2 ;;
  esac
done
echo "load average after: $(load)" >&2
node tests/node/bench/bench_server.mjs report "$results"
