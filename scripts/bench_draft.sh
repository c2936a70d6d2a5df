#!/usr/bin/env bash
# Speculative decoding (--draft-max) against none (--draft-max 0) through `promptcache run`, the
# two alternating for ROUNDS rounds on the same model, prompt and seed, printing the median
# generation speed of each and their ratio. The outputs are the same either way (the engine's
# tests check it; this script checks the text too). Cases:
#   exact      a prediction that is the output (Predicted Outputs for a file that comes back
#              unchanged): the best case
#   edited     the output with a tenth of it replaced by other words in the middle (an edit)
#   misleading a prediction built so that every lookup finds a wrong next token: the worst case
#   none       no prediction: only the prompt's and the output's own repeats are drafted
# Usage: scripts/bench_draft.sh MODEL [THREADS] [TOKENS] [ROUNDS]
set -euo pipefail
cd "$(dirname "$0")/.."
MODEL=${1:?usage: scripts/bench_draft.sh MODEL [THREADS] [TOKENS] [ROUNDS]}
THREADS=${2:-2}
TOKENS=${3:-64}
ROUNDS=${4:-5}
BIN=${BIN:-./build/promptcache}
PROMPT=${PROMPT:-"Once upon a time, there was a little girl named Lily. She loved to play outside in the park. One day, she saw a big, red ball."}
TEMP=${TEMP:-0.8}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

run() {  # run DRAFT_MAX PREDICTION_FILE OUT_FILE: prints "tokens/s accepted drafted"
  local pred=""
  [[ -s $2 ]] && pred=$(cat "$2")
  "$BIN" run -m "$MODEL" -p "$PROMPT" -n "$TOKENS" --temp "$TEMP" --seed 7 --ignore-eos \
    -t "$THREADS" --draft-max "$1" --prediction "$pred" >"$3" 2>"$work/log"
  awk '/generation:/ { for (i = 1; i <= NF; i++) if ($i == "tokens/s),") { gsub(/\(/, "", $(i-1)); s = $(i-1) } }
       /drafts:/ { a = $2; d = $4 }
       END { printf "%s %d %d\n", s, a, d }' "$work/log"
}

# The output without drafts, its tokens' pieces, and the predictions built from them.
run 0 /dev/null "$work/expected" >/dev/null
head -c -1 "$work/expected" >"$work/exact"  # `run` ends the text with a newline
"$BIN" tokenize -m "$MODEL" --no-bos --pieces "$(cat "$work/exact")" >"$work/pieces"
python3 - "$work" <<'EOF'
import ast, sys
work = sys.argv[1]
pieces = [ast.literal_eval(l.rstrip('\n').split('\t', 1)[1]) for l in open(work + '/pieces')]
n = len(pieces)
# An edit: a tenth of the pieces, in the middle, replaced.
a, b = n // 2 - n // 20, n // 2 + n // 20 + 1
open(work + '/edited', 'w').write(''.join(pieces[:a]) + ' something else entirely' + ''.join(pieces[b:]))
# Every pair of consecutive pieces followed by a wrong one: each lookup guesses wrong.
open(work + '/misleading', 'w').write(''.join(p + q + ' zebra' for p, q in zip(pieces, pieces[1:])))
open(work + '/none', 'w').write('')
EOF

printf '%-11s %12s %12s %7s %s\n' case "off tok/s" "on tok/s" "on/off" "drafts confirmed"
for c in exact edited misleading none; do
  off=() on=() acc="" 
  for ((r = 0; r < ROUNDS; r++)); do
    read -r s _ _ < <(run 0 "$work/$c" "$work/out0")
    off+=("$s")
    read -r s a d < <(run 8 "$work/$c" "$work/out8")
    on+=("$s")
    acc="$a of $d"
    cmp -s "$work/out0" "$work/out8" || { echo "$c: the outputs differ" >&2; exit 1; }
  done
  median() { printf '%s\n' "$@" | sort -g | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'; }
  m0=$(median "${off[@]}")
  m8=$(median "${on[@]}")
  printf '%-11s %12s %12s %7.2f %s\n' "$c" "$m0" "$m8" "$(echo "$m8 / $m0" | bc -l)" "$acc"
done
