#!/usr/bin/env bash
# Prompt processing and generation speed of promptcache and llama.cpp side by side, on the same
# files: for each model shape and weight type, the two engines' benchmarks run in turn (ours, then
# llama.cpp's llama-bench, R times), and the medians and their ratio are printed as a Markdown
# table (docs/benchmarks.md, "Weight types").
#
# Files: a shape's F16 file is made with `promptcache synth` (random weights, a real vocabulary),
# then each type with llama.cpp's own quantizer (`llama-quantize`), so both engines read the
# files users download from it; `-Q` makes them with `promptcache quantize` instead.
#
# usage: scripts/bench_vs_llama.sh -l LLAMA_BIN_DIR [-k IK_BIN_DIR] [-d MODELS_DIR] [-s "SHAPES"]
#            [-q "TYPES"] [-t THREADS] [-r REPEATS] [-p PROMPT] [-n GEN] [-P PROMPT_BIG]
#            [-N GEN_BIG] [-B "BIG_SHAPES"] [-V "SHAPE=VOCAB ..."] [-Q]
#   LLAMA_BIN_DIR: a llama.cpp build (llama-bench, llama-quantize), built outside this project
#   IK_BIN_DIR: an ik_llama.cpp build (its llama-bench, default settings), a third column pair
#   BIG_SHAPES: the shapes measured with -P/-N instead of -p/-n (default "llama3.2-1b")
#   SHAPE=VOCAB: the vocabulary GGUF synth uses for that shape (default: the GPT-2 one), e.g.
#     "qwen3-0.6b=qwen3-vocab.gguf" made with `promptcache vocab` (README)
#   An engine that cannot load a file (llama.cpp predates qwen3 and gemma3) gets "n/a".
#   defaults: models in /work/models, shapes "smollm2-135m llama3.2-1b", types "Q4_K_M Q4_0
#   Q5_K_M Q6_K IQ4_XS Q8_0 F16", 2 threads, 3 repeats, -p 512 -n 128 (the same for big shapes
#   unless -P/-N).
set -euo pipefail
cd "$(dirname "$0")/.."
llama=""
ik=""
dir=/work/models
shapes="smollm2-135m llama3.2-1b"
types="Q4_K_M Q4_0 Q5_K_M Q6_K IQ4_XS Q8_0 F16"
threads=2
repeats=3
pp=512
tg=128
pp_1b=""
tg_1b=""
big="llama3.2-1b"
vocabs=""
ours_quantize=0
while getopts "l:k:d:s:q:t:r:p:n:P:N:B:V:Qh" opt; do
  case $opt in
    l) llama=$OPTARG ;;
    k) ik=$OPTARG ;;
    d) dir=$OPTARG ;;
    s) shapes=$OPTARG ;;
    q) types=$OPTARG ;;
    t) threads=$OPTARG ;;
    r) repeats=$OPTARG ;;
    p) pp=$OPTARG ;;
    n) tg=$OPTARG ;;
    P) pp_1b=$OPTARG ;;
    N) tg_1b=$OPTARG ;;
    B) big=$OPTARG ;;
    V) vocabs=$OPTARG ;;
    Q) ours_quantize=1 ;;
    *) sed -n '2,24p' "$0"; exit 2 ;;
  esac
done
bin=build/promptcache
[ -n "$llama" ] && [ -x "$llama/llama-bench" ] || { echo "bench_vs_llama: give -l LLAMA_BIN_DIR" >&2; exit 2; }
[ -x "$bin" ] || { echo "bench_vs_llama: build $bin first" >&2; exit 1; }
vocab=../shared/tokenizers/ggml-vocab-gpt-2.gguf
mkdir -p "$dir"

# The median of the numbers on stdin, or "n/a" when there are none (an engine that failed).
median() {
  { grep -E '^[0-9.e+-]+$' || true; } | sort -g |
    awk '{v[NR]=$1} END {if (!NR) print "n/a"; else print (NR % 2) ? v[(NR+1)/2] : (v[NR/2] + v[NR/2+1]) / 2}'
}
vocab_for() {
  for pair in $vocabs; do [ "${pair%%=*}" = "$1" ] && { echo "${pair#*=}"; return; }; done
  echo "$vocab"
}
# a / b to two places, or n/a
ratio() { awk -v a="$1" -v b="$2" 'BEGIN {if (a == "n/a" || b == "n/a" || b == 0) print "n/a"; else printf "%.2f", a / b}'; }
num() { awk -v a="$1" 'BEGIN {if (a == "n/a") print "n/a"; else printf "%.1f", a}'; }
# llama-bench's CSV on stdin: avg_ts of the row with n_prompt = $1 and n_gen = $2 (a real CSV
# reader: ik_llama.cpp's rows have quoted fields with commas in them).
csv_rate() {
  python3 -c 'import csv, sys
for row in csv.DictReader(sys.stdin):
    if row["n_prompt"] == sys.argv[1] and row["n_gen"] == sys.argv[2]:
        print(row["avg_ts"])' "$1" "$2"
}

echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $threads threads, $repeats repeats" >&2
if [ -n "$ik" ]; then
  echo "| shape | type | file MiB | promptcache pp | llama.cpp pp | ik_llama.cpp pp | vs ik | promptcache tg | llama.cpp tg | ik_llama.cpp tg | vs ik | peak RSS MiB |"
  echo "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"
else
  echo "| shape | type | file MiB | promptcache pp | llama.cpp pp | ratio | promptcache tg | llama.cpp tg | ratio | peak RSS MiB |"
  echo "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"
fi
for shape in $shapes; do
  p=$pp
  n=$tg
  for b in $big; do [ "$shape" = "$b" ] && { p=${pp_1b:-$pp}; n=${tg_1b:-$tg}; }; done
  f16=$dir/$shape-f16.gguf
  for type in $types; do
    lower=$(echo "$type" | tr 'A-Z' 'a-z')
    file=$dir/$shape-$lower.gguf
    # The F16 file only when a file must be made from it (a 7B one is 14 GB).
    if [ ! -f "$file" ] && [ ! -f "$f16" ]; then
      "$bin" synth --preset "$shape" --vocab "$(vocab_for "$shape")" --type f16 -o "$f16" >&2
    fi
    if [ "$type" != F16 ] && [ ! -f "$file" ]; then
      if [ "$ours_quantize" = 1 ]; then
        "$bin" quantize "$f16" "$file" "$type" -t "$threads" >&2
      else
        "$llama/llama-quantize" "$f16" "$file" "$type" "$threads" >/dev/null 2>&1
      fi
    fi
    ours_pp=() ours_tg=() theirs_pp=() theirs_tg=() ik_pp=() ik_tg=() rss=()
    for _ in $(seq "$repeats"); do
      j=$("$bin" bench -m "$file" -t "$threads" -p "$p" -n "$n" -r 1 --json 2>/dev/null | tail -1)
      ours_pp+=("$(echo "$j" | sed -n 's/.*"prompt_tps":\([0-9.e+]*\).*/\1/p')")
      ours_tg+=("$(echo "$j" | sed -n 's/.*"gen_tps":\([0-9.e+]*\).*/\1/p')")
      rss+=("$(echo "$j" | sed -n 's/.*"peak_rss_bytes":\([0-9]*\).*/\1/p')")
      l=$("$llama/llama-bench" -m "$file" -t "$threads" -p "$p" -n "$n" -r 1 -o csv 2>/dev/null || true)
      theirs_pp+=("$(echo "$l" | csv_rate "$p" 0)")
      theirs_tg+=("$(echo "$l" | csv_rate 0 "$n")")
      if [ -n "$ik" ]; then
        k=$("$ik/llama-bench" -m "$file" -t "$threads" -p "$p" -n "$n" -r 1 -o csv 2>/dev/null || true)
        ik_pp+=("$(echo "$k" | csv_rate "$p" 0)")
        ik_tg+=("$(echo "$k" | csv_rate 0 "$n")")
      fi
    done
    opp=$(printf '%s\n' "${ours_pp[@]}" | median)
    otg=$(printf '%s\n' "${ours_tg[@]}" | median)
    tpp=$(printf '%s\n' "${theirs_pp[@]}" | median)
    ttg=$(printf '%s\n' "${theirs_tg[@]}" | median)
    mib=$(du -m "$file" | cut -f1)
    r=$(printf '%s\n' "${rss[@]}" | median)
    if [ -n "$ik" ]; then
      kpp=$(printf '%s\n' "${ik_pp[@]}" | median)
      ktg=$(printf '%s\n' "${ik_tg[@]}" | median)
      echo "| $shape | $type | $mib | $(num "$opp") | $(num "$tpp") | $(num "$kpp") | $(ratio "$opp" "$kpp") | $(num "$otg") | $(num "$ttg") | $(num "$ktg") | $(ratio "$otg" "$ktg") | $((r / 1048576)) |"
      continue
    fi
    echo "| $shape | $type | $mib | $(num "$opp") | $(num "$tpp") | $(ratio "$opp" "$tpp") | $(num "$otg") | $(num "$ttg") | $(ratio "$otg" "$ttg") | $((r / 1048576)) |"
  done
done
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)" >&2
