#!/usr/bin/env bash
# A burst of concurrent requests sharing a prefix (issue 34), promptcache side by side with
# llama.cpp's llama-server (and ik_llama.cpp's, if given): CLIENTS clients arrive together, each
# with a shared SYSTEM-token prefix and its own QUESTION-token question (the same token ids for
# every server), GEN tokens out. Each run starts a fresh server, sends the burst cold (nothing
# cached), then warm (the same prefix, new questions), and stops it; the servers take turns in
# each repetition (their order rotates), and the medians are printed as a Markdown table: wall
# time, time to first token (p50, max), prompt tokens the server computed (from its /metrics),
# cold / warm wall time. The client is tests/node/bench/bench_burst.mjs (OpenAI's npm client).
#
# usage: scripts/bench_burst.sh [-m MODEL] [-b BINARY] [-l LLAMA_BIN_DIR] [-k IK_BIN_DIR]
#            [-t THREADS] [-r REPEAT] [-c CLIENTS] [-s SYSTEM] [-q QUESTION] [-n GEN] [-p PORT]
#            [-f FIRST_REP] [-o RESULTS.jsonl]
#   defaults: /work/models/smollm2-135m-q8_0.gguf, build/promptcache, no peers, 2 threads,
#   3 repetitions numbered from FIRST_REP = 0 (the number picks the seeds and the servers'
#   order: -f resumes a series), 8 clients, 1000-token prefix, 16-token questions, 32 tokens out,
#   port 18190.
#   LLAMA_BIN_DIR / IK_BIN_DIR: builds of llama.cpp / ik_llama.cpp (their llama-server), made
#   outside this project, e.g. /work/peers/llama.cpp/build/bin. Each llama-server gets
#   -np CLIENTS (a slot per client) and a context of CLIENTS x 2048, with --metrics, and runs
#   with OMP_WAIT_POLICY=passive (override with the environment's OMP_WAIT_POLICY): both are built
#   with OpenMP, whose spinning threads collapse when the cores are shared with other work (on a
#   2-core machine under a load of ~12, one 1,016-token prompt: 19 tokens/s prefill and 4 s per
#   generated token spinning, 44 tokens/s and 0.11 s passive).
set -euo pipefail
cd "$(dirname "$0")/.."

model=/work/models/smollm2-135m-q8_0.gguf
bin=${PROMPTCACHE_BIN:-build/promptcache}
llama=""
ik=""
threads=2
repeat=3
clients=8
system=1000
question=16
gen=32
port=18190
results=""
first=0
while getopts "m:b:l:k:t:r:c:s:q:n:p:f:o:h" opt; do
  case $opt in
    m) model=$OPTARG ;;
    b) bin=$OPTARG ;;
    l) llama=$OPTARG ;;
    k) ik=$OPTARG ;;
    t) threads=$OPTARG ;;
    r) repeat=$OPTARG ;;
    c) clients=$OPTARG ;;
    s) system=$OPTARG ;;
    q) question=$OPTARG ;;
    n) gen=$OPTARG ;;
    p) port=$OPTARG ;;
    f) first=$OPTARG ;;
    o) results=$OPTARG ;;
    *) sed -n '2,25p' "$0"; exit 2 ;;
  esac
done
[ -x "$bin" ] || { echo "bench_burst: no binary at $bin (build it, or pass -b)" >&2; exit 1; }
[ -f "$model" ] || {
  echo "bench_burst: no model at $model; make it with:" >&2
  echo "  $bin synth --preset smollm2-135m --vocab ../shared/tokenizers/ggml-vocab-gpt-2.gguf --type q8_0 -o $model" >&2
  exit 1
}
for dir in $llama $ik; do
  [ -x "$dir/llama-server" ] || { echo "bench_burst: no llama-server in $dir" >&2; exit 1; }
done
[ -d tests/node/node_modules/openai ] || { echo "bench_burst: run scripts/setup.sh (npm client)" >&2; exit 1; }

source scripts/bench_lib.sh
bench_setup bench_burst

# Starts a server (the command line in "$@", run in the scratch folder: ik_llama.cpp's writes
# llama.log where it runs) and waits until $url/health answers 200 (llama-server answers 503
# while it loads the model).
start_server() {
  (cd "$work" && exec "$@") >"$work/server.log" 2>&1 &
  server_pid=$!
  wait_server "the server ($*)" 1200 healthy "$url"
}

# name, client kind, server command. Each server has a port of its own (PORT + its index): a
# port another server just closed can be refused for a while (its connections in TIME_WAIT).
bin=$(realpath "$bin")
model=$(realpath "$model")
servers=("promptcache|promptcache|$bin serve -m $model -t $threads --parallel $clients --host 127.0.0.1 --port $port")
llama_args="-m $model -t $threads -np $clients -c $((clients * 2048)) --host 127.0.0.1 --metrics"
omp="env OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-passive}"
[ -n "$llama" ] && servers+=("llama-server|llama|$omp $(realpath "$llama")/llama-server $llama_args --port $((port + ${#servers[@]}))")
[ -n "$ik" ] && servers+=("ik_llama.cpp|llama|$omp $(realpath "$ik")/llama-server $llama_args --port $((port + ${#servers[@]}))")

echo "machine: $(machine)" >&2
echo "model: $model, $threads threads, $repeat repetitions; load average before: $(load)" >&2
n=${#servers[@]}
for r in $(seq "$first" $((first + repeat - 1))); do
  for i in $(seq 0 $((n - 1))); do
    j=$(((i + r) % n))
    IFS='|' read -r label kind cmd <<<"${servers[$j]}"
    url=http://127.0.0.1:$((port + j))
    echo "== $label, run $r (load $(load))" >&2
    # shellcheck disable=SC2086  # the command line splits into words
    start_server $cmd
    node tests/node/bench/bench_burst.mjs run "$url" --kind "$kind" --label "$label" --rep "$r" \
      --seed $((r + 1)) --clients "$clients" --system "$system" --question "$question" \
      --gen "$gen" >>"$results"
    stop_server
  done
done
echo "load average after: $(load)" >&2
node tests/node/bench/bench_burst.mjs report "$results"
