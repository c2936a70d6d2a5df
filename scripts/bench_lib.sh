# What the server benchmarks share (bench_server.sh, bench_burst.sh, bench_contention.sh), sourced
# after a script has parsed its options: a scratch folder and a results file, the one server a
# script runs at a time (stopped, with the scratch folder removed, at exit), a wait until that
# server is ready, and the machine and its load for the log.

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
