# What the server benchmarks share (bench_server.sh, bench_burst.sh, bench_contention.sh), sourced
# after a script has parsed its options: a scratch folder and a results file, the one server a
# script runs at a time (stopped, with the scratch folder removed, at exit), a wait until that
# server is ready, and the machine and its load for the log; and the Redis benchmarks' setup.

# bench_setup NAME: $work (a scratch folder), $results (as given, else $work/results.jsonl;
# emptied) and the exit trap. A script with more to undo at exit defines bench_on_exit.
bench_setup() {
  bench_name=$1
  work=$(mktemp -d "${TMPDIR:-/tmp}/$bench_name.XXXXXX")
  [ -n "${results:-}" ] || results=$work/results.jsonl
  : >"$results"
  server_pid=""
  trap 'bench_at_exit' EXIT
}
bench_at_exit() {
  if declare -F bench_on_exit >/dev/null; then bench_on_exit; fi
  stop_server
  rm -rf "$work"
}

# Stops the server started last (if it still runs) and waits for it to end.
stop_server() {
  if [ -n "$server_pid" ] && kill -0 "$server_pid" 2>/dev/null; then
    kill -TERM "$server_pid" 2>/dev/null || true
    wait "$server_pid" 2>/dev/null || true
  fi
  server_pid=""
}

# wait_server WHAT TRIES CHECK...: after a server was started in the background ($server_pid, its
# output in $work/server.log), runs CHECK every 0.1 s until it succeeds; if the server ends first,
# or after TRIES tries, prints its log and exits.
wait_server() {
  local what=$1 tries=$2
  shift 2
  for _ in $(seq 1 "$tries"); do
    "$@" && return 0
    kill -0 "$server_pid" 2>/dev/null || break
    sleep 0.1
  done
  echo "$bench_name: $what did not start" >&2
  cat "$work/server.log" >&2
  exit 1
}
# Whether URL/health answers 200 (llama-server answers 503 while it loads the model).
healthy() { curl -sf "$1/health" >/dev/null 2>&1; }

load() { cut -d' ' -f1-3 /proc/loadavg; }
machine() { echo "$(nproc) CPUs, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')"; }

# What the Redis benchmarks (bench_redis.sh, bench_redis_stall.sh, bench_redis_fetch_burst.sh)
# share, without bench_setup's scratch folder: their folder keeps the synthesized model between
# runs.
# redis_bench_setup WORK BIN: $work and $model (smollm2-135m's shape, synthesized by BIN once),
# a redis-server on $port (its pid in $redis; replicas take the ports after it), and $pids,
# killed at exit (a script adds the processes it starts).
redis_bench_setup() {
  work=$1
  mkdir -p "$work"
  model=$work/smollm2-135m-q8_0.gguf
  [ -f "$model" ] || "$2" synth --preset smollm2-135m \
    --vocab ../shared/tokenizers/ggml-vocab-gpt-2.gguf --type q8_0 -o "$model" >/dev/null
  port=$((20000 + RANDOM % 20000))
  pids=()
  trap 'for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done' EXIT
  redis-server --port "$port" --bind 127.0.0.1 --save '' --appendonly no --dir "$work" \
    --maxmemory-policy allkeys-lru >/dev/null &
  redis=$!
  pids+=("$redis")
  sleep 0.5
}

# redis_delay_proxy LISTEN TARGET MS: a proxy on 127.0.0.1:LISTEN to the Redis on TARGET that
# holds each chunk it forwards MS ms, in order, both ways (a slow link); its pid joins $pids.
redis_delay_proxy() {
  TARGET=$2 LISTEN=$1 DELAY_MS=$3 node -e '
    const net = require("net");
    const { TARGET, LISTEN, DELAY_MS } = process.env;
    const later = (to) => (d) => setTimeout(() => to.destroyed || to.write(d), Number(DELAY_MS));
    net.createServer((c) => {
      const r = net.connect(Number(TARGET), "127.0.0.1");
      c.on("data", later(r)); r.on("data", later(c));
      c.on("error", () => r.destroy()); r.on("error", () => c.destroy());
      c.on("close", () => r.destroy()); r.on("close", () => c.destroy());
    }).listen(Number(LISTEN), "127.0.0.1");' &
  pids+=($!)
  sleep 0.3
}

# redis_bench_link MS: the port the replicas reach redis_bench_setup's Redis on, in $redis_port:
# its own with MS 0, else a redis_delay_proxy holding each chunk MS ms, on $port + 3.
redis_bench_link() {
  redis_port=$port
  if [ "$1" != 0 ]; then
    redis_port=$((port + 3))
    redis_delay_proxy "$redis_port" "$port" "$1"
  fi
}

# redis_bench_serve BIN PORT LOG CACHE_RAM_MIB [FLAGS]: a replica of the model on PORT reading
# and writing the Redis at $redis_port (stderr to LOG; SERVE_ARGS adds flags); its pid in
# $served and $pids. wait_listening LOG: until it says it listens (exits after 20 s).
redis_bench_serve() {
  : >"$3"
  # shellcheck disable=SC2086
  "$1" serve -m "$model" -t 2 -c 4096 --port "$2" --cache-redis "redis://127.0.0.1:$redis_port" \
    --cache-ram "$4" ${5:-} ${SERVE_ARGS:-} 2>"$3" &
  served=$!
  pids+=("$served")
}
wait_listening() {
  for _ in $(seq 100); do grep -q listening "$1" && return; sleep 0.2; done
  echo "no server: $(tail -3 "$1")" >&2
  exit 1
}
