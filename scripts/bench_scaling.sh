#!/usr/bin/env bash
# How prompt processing and generation scale with threads, for promptcache and every peer engine
# given (llama.cpp's llama-bench; ik_llama.cpp's llama-bench as is and with -rtr 1, its run-time
# repacking), on the same files, over a list of thread counts. For each shape, type and thread
# count the engines run in turn, R rounds (so that a change in the machine's load hits them all
# alike), and the medians are printed as two Markdown tables:
#   speeds: tokens/s of each engine, and promptcache's ratio to the best peer;
#   scaling: each engine's efficiency at t threads, speed(t) / (t x speed(1)) (needs 1 in the
#     list), and the gain from the list's first to last count (and 4 -> 16 when both are in it).
# With -c N, N busy processes (a CPU-bound shell loop each, at nice -C) run beside every engine
# run, started before it and killed after: how each engine copes with a busy machine.
# With -P DIR, `promptcache bench --profile` is run once per shape, type and thread count too, its
# output written to DIR/SHAPE-TYPE-tN.txt (where the time goes, and the bytes of weights and K/V
# each operation and thread read: core/profile.h), and a third table sums them up per thread
# count: generation's time per token, parallel jobs per token, bytes read per token and the rate,
# and how evenly the threads shared the bytes.
#
# Files are made as scripts/bench_vs_llama.sh makes them: `promptcache synth` writes the shape's
# F16 file (random weights, a real vocabulary), llama.cpp's llama-quantize each type (-Q: ours).
#
# usage: scripts/bench_scaling.sh [-l LLAMA_BIN_DIR] [-k IK_BIN_DIR] [-d MODELS_DIR] [-s "SHAPES"]
#            [-q "TYPES"] [-T "THREADS"] [-r ROUNDS] [-p PROMPT] [-n GEN] [-c BUSY] [-C NICE]
#            [-V "SHAPE=VOCAB ..."] [-P PROFILE_DIR] [-Q]
#   defaults: models in /work/models, shapes "smollm2-135m llama3.2-1b", types "Q8_0",
#   threads "1 2 4 8 16" (counts above the machine's CPUs are skipped), 3 rounds, -p 512 -n 128,
#   no busy processes (nice 0 when -c is given).
#   Without -l there is no llama-quantize: the files are made with `promptcache quantize`.
set -euo pipefail
cd "$(dirname "$0")/.."
llama=""
ik=""
dir=/work/models
shapes="smollm2-135m llama3.2-1b"
types="Q8_0"
thread_list="1 2 4 8 16"
rounds=3
pp=512
tg=128
busy=0
busy_nice=0
vocabs=""
profile_dir=""
ours_quantize=0
while getopts "l:k:d:s:q:T:r:p:n:c:C:V:P:Qh" opt; do
  case $opt in
    l) llama=$OPTARG ;;
    k) ik=$OPTARG ;;
    d) dir=$OPTARG ;;
    s) shapes=$OPTARG ;;
    q) types=$OPTARG ;;
    T) thread_list=$OPTARG ;;
    r) rounds=$OPTARG ;;
    p) pp=$OPTARG ;;
    n) tg=$OPTARG ;;
    c) busy=$OPTARG ;;
    C) busy_nice=$OPTARG ;;
    V) vocabs=$OPTARG ;;
    P) profile_dir=$OPTARG ;;
    Q) ours_quantize=1 ;;
    *) sed -n '2,27p' "$0"; exit 2 ;;
  esac
done
bin=build/promptcache
[ -x "$bin" ] || { echo "bench_scaling: build $bin first" >&2; exit 1; }
if [ -n "$llama" ] && [ ! -x "$llama/llama-bench" ]; then
  echo "bench_scaling: no llama-bench in $llama" >&2; exit 2
fi
if [ -n "$ik" ] && [ ! -x "$ik/llama-bench" ]; then
  echo "bench_scaling: no llama-bench in $ik" >&2; exit 2
fi
[ -n "$llama" ] || ours_quantize=1
[[ "$busy" =~ ^[0-9]+$ ]] || { echo "bench_scaling: -c takes a count" >&2; exit 2; }
vocab=../shared/tokenizers/ggml-vocab-gpt-2.gguf
mkdir -p "$dir"
[ -z "$profile_dir" ] || mkdir -p "$profile_dir"
cpus=$(nproc)
# SCALING_RAW: keep every run's rate in this file (one line each, written as it ends), e.g. to
# read what a run cut short had measured.
raw=${SCALING_RAW:-$(mktemp "${TMPDIR:-/tmp}/bench_scaling.XXXXXX")}
busy_pids=()
stop_busy() {
  for p in "${busy_pids[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${busy_pids[@]}"; do wait "$p" 2>/dev/null || true; done
  busy_pids=()
}
trap 'stop_busy; [ -n "${SCALING_RAW:-}" ] || rm -f "$raw"' EXIT
start_busy() {
  for _ in $(seq "$busy"); do
    nice -n "$busy_nice" bash -c 'while :; do :; done' &
    busy_pids+=($!)
  done
}

vocab_for() {
  for pair in $vocabs; do [ "${pair%%=*}" = "$1" ] && { echo "${pair#*=}"; return; }; done
  echo "$vocab"
}
# llama-bench's CSV on stdin: avg_ts of the row with n_prompt = $1 and n_gen = $2.
csv_rate() {
  python3 -c 'import csv, sys
for row in csv.DictReader(sys.stdin):
    if row["n_prompt"] == sys.argv[1] and row["n_gen"] == sys.argv[2]:
        print(row["avg_ts"])' "$1" "$2"
}
json_field() { python3 -c 'import json, sys
try:
    print(json.loads(sys.stdin.read().strip().splitlines()[-1])[sys.argv[1]])
except Exception:
    pass' "$1"; }
# One measurement line: shape type threads engine test value (nothing when the run failed).
record() { [ -n "$6" ] && printf '%s\t%s\t%s\t%s\t%s\t%s\n' "$@" >>"$raw" || true; }
# Runs one engine once (under the busy processes, if any) and records its two rates.
run_engine() {
  local engine=$1 file=$2 t=$3 shape=$4 type=$5 out
  start_busy
  case $engine in
    promptcache)
      out=$("$bin" bench -m "$file" -t "$t" -p "$pp" -n "$tg" -r 1 --json 2>/dev/null || true)
      stop_busy
      record "$shape" "$type" "$t" "$engine" pp "$(echo "$out" | json_field prompt_tps)"
      record "$shape" "$type" "$t" "$engine" tg "$(echo "$out" | json_field gen_tps)"
      return ;;
    llama.cpp) out=$("$llama/llama-bench" -m "$file" -t "$t" -p "$pp" -n "$tg" -r 1 -o csv 2>/dev/null || true) ;;
    ik_llama.cpp) out=$("$ik/llama-bench" -m "$file" -t "$t" -p "$pp" -n "$tg" -r 1 -o csv 2>/dev/null || true) ;;
    "ik -rtr 1") out=$("$ik/llama-bench" -m "$file" -t "$t" -p "$pp" -n "$tg" -r 1 -rtr 1 -o csv 2>/dev/null || true) ;;
  esac
  stop_busy
  record "$shape" "$type" "$t" "$engine" pp "$(echo "$out" | csv_rate "$pp" 0)"
  record "$shape" "$type" "$t" "$engine" tg "$(echo "$out" | csv_rate 0 "$tg")"
}

engines=(promptcache)
[ -z "$llama" ] || engines+=(llama.cpp)
[ -z "$ik" ] || engines+=(ik_llama.cpp "ik -rtr 1")
echo "machine: $cpus CPUs, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //');" \
  "threads: $thread_list; $rounds rounds; -p $pp -n $tg; $busy busy processes (nice $busy_nice);" \
  "load average before: $(cut -d' ' -f1-3 /proc/loadavg)" >&2
for shape in $shapes; do
  f16=$dir/$shape-f16.gguf
  for type in $types; do
    lower=$(echo "$type" | tr 'A-Z' 'a-z')
    file=$dir/$shape-$lower.gguf
    if [ ! -f "$file" ] && [ ! -f "$f16" ]; then
      "$bin" synth --preset "$shape" --vocab "$(vocab_for "$shape")" --type f16 -o "$f16" >&2
    fi
    if [ "$type" != F16 ] && [ ! -f "$file" ]; then
      if [ "$ours_quantize" = 1 ]; then
        "$bin" quantize "$f16" "$file" "$type" >&2
      else
        "$llama/llama-quantize" "$f16" "$file" "$type" >/dev/null 2>&1
      fi
    fi
    for t in $thread_list; do
      if [ "$t" -gt "$cpus" ]; then
        echo "  $shape $type: skipping $t threads (more than the $cpus CPUs)" >&2
        continue
      fi
      for r in $(seq "$rounds"); do
        for engine in "${engines[@]}"; do run_engine "$engine" "$file" "$t" "$shape" "$type"; done
        echo "  $shape $type t=$t round $r done (load $(cut -d' ' -f1 /proc/loadavg))" >&2
      done
      if [ -n "$profile_dir" ]; then
        start_busy
        "$bin" bench -m "$file" -t "$t" -p "$pp" -n "$tg" -r 1 --profile --json \
          >"$profile_dir/$shape-$lower-t$t.txt" 2>&1 || true
        stop_busy
      fi
    done
  done
done
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)" >&2

python3 - "$raw" "$profile_dir" "${engines[@]}" <<'EOF'
import json, os, statistics, sys
from collections import defaultdict

raw, profile_dir, engines = sys.argv[1], sys.argv[2], sys.argv[3:]
runs = defaultdict(list)   # (shape, type, threads, engine, test) -> rates
keys = []                  # (shape, type) in order
threads = defaultdict(list)
for line in open(raw):
    shape, typ, t, engine, test, value = line.rstrip("\n").split("\t")
    try:
        v = float(value)
    except ValueError:
        continue
    if (shape, typ) not in keys:
        keys.append((shape, typ))
    if int(t) not in threads[(shape, typ)]:
        threads[(shape, typ)].append(int(t))
    runs[(shape, typ, int(t), engine, test)].append(v)

def med(shape, typ, t, engine, test):
    v = runs.get((shape, typ, t, engine, test))
    return statistics.median(v) if v else None

def num(x):
    return "n/a" if x is None else f"{x:.1f}"

def ratio(a, b):
    return "n/a" if a is None or not b else f"{a / b:.2f}"

peers = engines[1:]
head = ["shape", "type", "threads"]
for test in ("pp", "tg"):
    head += [f"{e} {test}" for e in engines]
    if peers:
        head.append(f"{test} vs best peer")
print("| " + " | ".join(head) + " |")
print("| --- | --- | ---: |" + " ---: |" * (len(head) - 3))
for shape, typ in keys:
    for t in threads[(shape, typ)]:
        row = [shape, typ, str(t)]
        for test in ("pp", "tg"):
            vals = [med(shape, typ, t, e, test) for e in engines]
            row += [num(v) for v in vals]
            if peers:
                best = max((v for v in vals[1:] if v is not None), default=None)
                row.append(ratio(vals[0], best))
        print("| " + " | ".join(row) + " |")

print()
print("Scaling efficiency, speed(t) / (t x speed(1)):")
print()
for shape, typ in keys:
    ts = sorted(threads[(shape, typ)])
    gains = [(ts[0], ts[-1])] if len(ts) > 1 else []
    if 4 in ts and 16 in ts and (4, 16) not in gains:
        gains.append((4, 16))
    head = ["shape", "type", "engine", "test"] + [f"t={t}" for t in ts] + \
        [f"gain {a}->{b}" for a, b in gains]
    print("| " + " | ".join(head) + " |")
    print("| --- | --- | --- | --- |" + " ---: |" * (len(head) - 4))
    for engine in engines:
        for test in ("pp", "tg"):
            one = med(shape, typ, 1, engine, test)
            cells = []
            for t in ts:
                v = med(shape, typ, t, engine, test)
                cells.append("n/a" if v is None or not one else f"{100 * v / (t * one):.0f}%")
            for a, b in gains:
                cells.append(ratio(med(shape, typ, b, engine, test), med(shape, typ, a, engine, test)) + "x")
            print("| " + " | ".join([shape, typ, engine, test] + cells) + " |")
    print()
print("Rounds per cell (min-max of the rates):")
for (shape, typ, t, engine, test), v in runs.items():
    print(f"  {shape} {typ} t={t} {engine} {test}: n={len(v)}, {min(v):.1f}-{max(v):.1f}")
if profile_dir:
    print("promptcache's generation profile (bench --profile, one run each): time and parallel jobs")
    print("per token, weights and K/V read per token and the rate over the pass, and the bytes of")
    print("the threads that read the least and the most (an even split: both near MiB / threads):")
    print()
    print("| shape | type | threads | ms/token | jobs/token | MiB/token | GB/s | thread MiB min-max |")
    print("| --- | --- | ---: | ---: | ---: | ---: | ---: | --- |")
    for shape, typ in keys:
        for t in sorted(threads[(shape, typ)]):
            path = os.path.join(profile_dir, f"{shape}-{typ.lower()}-t{t}.txt")
            try:
                last = open(path).read().strip().splitlines()[-1]
                g = json.loads(last)["profile"]["generation"]
            except (OSError, IndexError, KeyError, ValueError):
                continue
            per_token = g["us_per_pass"] * g["passes"] / max(1, g["tokens"])
            mib = g["bytes_per_pass"] / 2**20
            shares = [th["bytes_per_pass"] / 2**20 for th in g["per_thread"]]
            print(f"| {shape} | {typ} | {t} | {per_token / 1e3:.2f} | {g['jobs_per_pass']:.0f} | "
                  f"{mib:.1f} | {g['bytes_per_pass'] / (g['us_per_pass'] * 1e3):.1f} | "
                  f"{min(shares):.1f}-{max(shares):.1f} |")
    print()
EOF
