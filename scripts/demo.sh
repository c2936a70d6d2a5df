#!/usr/bin/env bash
# Builds promptcache and runs the demo on stories260K (../shared/models), in under a minute:
#   1. the same greedy generation with and without the KV cache, and how long each took;
#   2. through the server, a long prompt cold and then the same prefix with a new ending: time
#      to first token and how many prompt tokens came from the prefix cache;
#   3. a schema's modules swapped in a prompt (each combination served from cached modules)
#      against the full recompute of the same text;
#   4. `bench --plot`: the charts of what caching saves, as SVG.
# It ends by printing where to open the web page and the plot it wrote.
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

echo "== 1. with the KV cache: each new token costs one token of work"
run
with=$ms
echo
echo "== without it (--no-kv-cache): every new token recomputes the whole sequence"
run --no-kv-cache
without=$ms
echo
awk -v a="$with" -v b="$without" -v n=$n 'BEGIN {
  printf "%d tokens: %.1f ms with the KV cache, %.1f ms without: %.1fx faster with it\n", n, a, b, b / a }'

# Two servers on free ports for parts 2 and 3, stopped when the script ends: one with the prefix
# cache, and one without it (--no-prefix-cache) for the full recomputes.
logs=$(mktemp -d)
pids=()
trap 'kill "${pids[@]}" 2>/dev/null; wait 2>/dev/null; rm -rf "$logs"' EXIT
start() {  # start NAME FLAGS...: starts a server, sets $url to its address
  ./build/promptcache serve -m "$model" --port 0 -t 1 "${@:2}" 2>"$logs/$1" &
  pids+=($!)
  url=""
  for _ in $(seq 100); do
    url=$(sed -n 's/.*listening on \(http:[^ ]*\).*/\1/p' "$logs/$1")
    [ -n "$url" ] && return
    sleep 0.1
  done
  cat "$logs/$1" >&2
  exit 1
}
start baseline --no-prefix-cache
baseline=$url
start cached
model_id=$(basename "$model" .gguf)
complete() {  # complete JSON-FIELDS [URL]: POST /v1/completions, prints the answer's JSON
  curl -sSf "${2:-$url}/v1/completions" -H 'Content-Type: application/json' \
    -d "{\"model\": \"$model_id\", \"max_tokens\": 16, \"temperature\": 0, $1}"
}
# Reads a completion's JSON on stdin; prints "LABEL: ttft, cached/prompt tokens".
report() {
  python3 -c '
import json, sys
r = json.load(sys.stdin); t = r["timings"]
print("  %-34s TTFT %6.2f ms, %3d of %3d prompt tokens cached, %3d computed" % (
    sys.argv[1], t["ttft_ms"], t["cached_tokens"], t["prompt_tokens"], t["computed_tokens"]))' "$1"
}
json_prompt() { python3 -c 'import json, sys; print(json.dumps(sys.argv[1]))' "$1"; }

story="Once upon a time, there was a little girl named Lily. She lived in a small house near a big \
forest with her mom, her dad and her dog Max. Every morning Lily and Max walked to the park, where \
the birds sang in the tall trees and the flowers were red, yellow and blue. Lily liked to swing \
high and look at the sky. One day, she saw a little bird that could not fly. Its wing was hurt. \
Lily was sad for the bird. She took it home in her hat and gave it water and seeds. Her mom helped \
her make a soft bed in a box. Every day Lily talked to the bird and sang it songs. After many days \
the bird was strong again."
echo
echo "== 2. the prefix cache: a long prompt cold, then the same prefix with a new ending"
complete "\"prompt\": $(json_prompt "$story One day, Lily")" |
  report "cold:"
complete "\"prompt\": $(json_prompt "$story It flew up to the tree and")" |
  report "same prefix, new ending:"
echo "  (the second prompt computes only its new ending; cached_tokens is what it reused)"

echo
echo "== 3. a schema's modules swapped (examples/story/story.xml): each prompt reuses the cached"
echo "   modules it picks and computes only its own text, against the full recompute of that text"
curl -sSf "$url/v1/schemas" -H 'Content-Type: application/xml' \
  --data-binary @examples/story/story.xml | python3 -c '
import json, sys
r = json.load(sys.stdin)
print("  loaded schema %s: %d modules, %d tokens encoded once in %.1f ms" % (
    r["name"], r["module_count"], r["load"]["encoded_tokens"], r["load"]["encode_ms"]))'
for mods in "<lily/><park/>" "<tim/><lake/>" "<sue/><park/><ask/>"; do
  pml="<prompt schema=\"story\">$mods<![CDATA[
One day,]]></prompt>"
  answer=$(complete "\"prompt\": $(json_prompt "$pml"), \"cache_map\": true")
  echo "$answer" | report "modules $mods:"
  # The same text as a plain prompt, every token computed (the server without a prefix cache).
  text=$(echo "$answer" | python3 -c '
import json, sys
m = json.load(sys.stdin)["cache_map"]
text = "".join(m["pieces"][1:m["prompt_tokens"]])  # after BOS
print(text[1:] if text.startswith(" ") else text, end="")  # less the dummy-prefix space')
  complete "\"prompt\": $(json_prompt "$text")" "$baseline" |
    report "  full recompute of that text:"
done

echo
echo "== 4. bench --plot: generation with and without the KV cache, TTFT cold / prefix hit /"
echo "   modules, K/V bytes per token (stories260K, -p 256 -n 128)"
./build/promptcache bench -m "$model" -t 1 -p 256 -n 128 -r 1 --plot build/bench-plot.svg |
  sed -n '/^ *tokens/,$p' | sed 's/^/  /'

echo
echo "The plot: build/bench-plot.svg (open it in a browser)."
echo "The web page (chat, cache maps, prefix tree, schemas, live metrics):"
echo "  ./build/promptcache serve -m $model"
echo "  then open http://127.0.0.1:8080/"
