#!/usr/bin/env bash
# The server on a busy machine: promptcache serve and llama.cpp's llama-server side by side, idle
# and with BUSY CPU-bound processes running beside them, on the same model file. Measured per
# engine: the warm time to first token of a 3,300-token prompt whose 3,290-token prefix is
# cached (the request's wall time: the same clock for both servers), and the decode rate
# (scripts/bench_contention.py). Rounds alternate the engines; within a round each engine is
# measured idle, then with the busy processes started, which are killed after. The table gives
# medians with min-max, each engine's slowdown under load, and promptcache against llama-server.
# The goal (issue 32): promptcache slows down no more than llama-server does.
#
# usage: scripts/bench_contention.sh [-l LLAMA_BIN_DIR] [-B BASE_BINARY] [-m MODEL] [-b BINARY]
#            [-t THREADS] [-r ROUNDS] [-k PER_ROUND] [-c BUSY] [-C NICE] [-g GEN] [-p PORT]
#            [-o RESULTS.jsonl]
#   LLAMA_BIN_DIR: a llama.cpp build with llama-server (built outside this project)
#   BASE_BINARY: another promptcache build measured the same way, as "promptcache-base" (e.g.
#   the commit before a change); at least one of -l and -B
#   defaults: /work/models/smollm2-135m-q8_0.gguf, build/promptcache, threads = the machine's
#   CPUs, 3 rounds of 2 measurements per engine and load, 1 busy process at nice 0 (the busy
#   process is a shell loop: `while :; do :; done`), 64 generated tokens, ports 18190 to 18192.
set -euo pipefail
cd "$(dirname "$0")/.."
llama=""
model=/work/models/smollm2-135m-q8_0.gguf
bin=build/promptcache
threads=$(nproc)
rounds=3
per_round=2
busy=1
busy_nice=0
gen=64
port=18190
results=""
base_bin=""
while getopts "l:B:m:b:t:r:k:c:C:g:p:o:h" opt; do
  case $opt in
    l) llama=$OPTARG ;;
    B) base_bin=$OPTARG ;;
    m) model=$OPTARG ;;
    b) bin=$OPTARG ;;
    t) threads=$OPTARG ;;
    r) rounds=$OPTARG ;;
    k) per_round=$OPTARG ;;
    c) busy=$OPTARG ;;
    C) busy_nice=$OPTARG ;;
    g) gen=$OPTARG ;;
    p) port=$OPTARG ;;
    o) results=$OPTARG ;;
    *) sed -n '2,20p' "$0"; exit 2 ;;
  esac
done
engines=(promptcache)
if [ -n "$llama" ]; then
  [ -x "$llama/llama-server" ] || { echo "bench_contention: no llama-server in $llama" >&2; exit 2; }
  engines+=(llama-server)
fi
if [ -n "$base_bin" ]; then
  [ -x "$base_bin" ] || { echo "bench_contention: no binary at $base_bin" >&2; exit 2; }
  engines+=(promptcache-base)
fi
[ ${#engines[@]} -gt 1 ] || { echo "bench_contention: give -l LLAMA_BIN_DIR and/or -B BASE_BINARY" >&2; exit 2; }
[ -x "$bin" ] || { echo "bench_contention: no binary at $bin (build it, or pass -b)" >&2; exit 1; }
[ -f "$model" ] || {
  echo "bench_contention: no model at $model; make it with:" >&2
  echo "  $bin synth --preset smollm2-135m --vocab ../shared/tokenizers/ggml-vocab-gpt-2.gguf --type f16 -o /tmp/f16.gguf" >&2
  echo "  $llama/llama-quantize /tmp/f16.gguf $model Q8_0" >&2
  exit 1
}

source scripts/bench_lib.sh
bench_setup bench_contention
busy_pids=()
stop_busy() {
  for p in "${busy_pids[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${busy_pids[@]}"; do wait "$p" 2>/dev/null || true; done
  busy_pids=()
}
bench_on_exit() { stop_busy; }
start_busy() {
  for _ in $(seq "$busy"); do
    nice -n "$busy_nice" bash -c 'while :; do :; done' &
    busy_pids+=($!)
  done
}

# Starts an engine's server and waits until it answers.
start_server() {
  local engine=$1 url=$2 p=$3
  if [ "$engine" = promptcache ] || [ "$engine" = promptcache-base ]; then
    local b=$bin
    [ "$engine" = promptcache ] || b=$base_bin
    "$b" serve -m "$model" -t "$threads" --parallel 1 --host 127.0.0.1 --port "$p" \
      2>"$work/server.log" &
  else
    "$llama/llama-server" -m "$model" -t "$threads" -c 4096 -np 1 --host 127.0.0.1 --port "$p" \
      >"$work/server.log" 2>&1 &
  fi
  server_pid=$!
  wait_server "$engine" 600 healthy "$url"
}

echo "machine: $(machine)" >&2
echo "model: $model, $threads threads, $rounds rounds x $per_round per engine and load," \
  "$busy busy processes at nice $busy_nice, $gen generated tokens; load average before: $(load)" >&2
seed=1
for r in $(seq "$rounds"); do
  # Alternate the engines' order from round to round.
  order=("${engines[@]}")
  if [ $((r % 2)) = 0 ]; then
    order=()
    for ((i = ${#engines[@]} - 1; i >= 0; i--)); do order+=("${engines[$i]}"); done
  fi
  for engine in "${order[@]}"; do
    case $engine in
      promptcache) p=$port ;;
      llama-server) p=$((port + 1)) ;;
      *) p=$((port + 2)) ;;
    esac
    url=http://127.0.0.1:$p
    start_server "$engine" "$url" "$p"
    # The prefix cached once per server (untimed, idle), then an untimed warm measurement:
    # page faults of the mapping, the first allocations.
    python3 scripts/bench_contention.py fill "$url" --prefix-seed "$r"
    python3 scripts/bench_contention.py measure "$url" --engine "$engine" --load warmup \
      --prefix-seed "$r" --seed $((seed++)) --gen 4 >/dev/null
    for load_kind in idle loaded; do
      [ "$load_kind" = idle ] || start_busy
      for _ in $(seq "$per_round"); do
        python3 scripts/bench_contention.py measure "$url" --engine "$engine" --load "$load_kind" \
          --prefix-seed "$r" --seed $((seed++)) --gen "$gen" >>"$results"
      done
      stop_busy
    done
    stop_server
  done
  echo "round $r done (load $(load))" >&2
done
echo "load average after: $(load)" >&2
python3 scripts/bench_contention.py report "$results"
