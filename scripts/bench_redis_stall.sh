#!/usr/bin/env bash
# Does a Redis lookup hold up the other requests? (docs/benchmarks.md, "A Redis lookup beside a
# stream"). Replica A computes a ~3,300-token prefix into Redis; on replica B a stream generates
# while B is asked for that prefix with a new ending (its RAM emptied first, so the prefix comes
# from Redis). Reported per round: the stream's longest gap between two tokens while the lookup
# ran, its median gap, and the prefix request's time to first token. Each build dir given is run
# in turn, round by round, on the same Redis contents (the binaries must share the KV format).
#   scripts/bench_redis_stall.sh BUILD_DIR [BUILD_DIR...]   (writes into /tmp/pc-bench-stall)
# REPEAT: rounds per binary (default 5). DELAY_MS: Redis reached through a proxy that holds each
# chunk it forwards this long (default 0: loopback as it is). SERVE_ARGS: more serve flags for
# both replicas (e.g. "--kv-prefault").
set -euo pipefail
cd "$(dirname "$0")/.."
(($# >= 1)) || { echo "usage: $0 BUILD_DIR [BUILD_DIR...]" >&2; exit 2; }
# shellcheck source=bench_lib.sh
source scripts/bench_lib.sh
redis_bench_setup /tmp/pc-bench-stall "$1/promptcache"
redis_bench_link "${DELAY_MS:-0}"
redis_bench_serve "$1/promptcache" $((port + 1)) "$work/a.log" 256
wait_listening "$work/a.log"
A=http://127.0.0.1:$((port + 1)) node - <<'EOF'
const words = 'the quick brown fox jumps over a lazy dog while seven small birds sing about rivers'.split(' ');
let prefix = '';
for (let i = 0; prefix.split(' ').length < 3300; i++) prefix += words[(i * 7) % words.length] + ' ';
const r = await fetch(process.env.A + '/v1/completions', { method: 'POST', headers: { 'content-type': 'application/json' },
  body: JSON.stringify({ model: 'smollm2-135m-q8_0', prompt: prefix + 'Ending one.', max_tokens: 1, temperature: 0 }) });
if (r.status !== 200) throw new Error(`${r.status} ${await r.text()}`);
await new Promise((res) => setTimeout(res, 3000));  // A's writer sends the blocks to Redis
EOF
rounds=${REPEAT:-5}
for ((round = 0; round < rounds; round++)); do
  for build in "$@"; do
    log=$work/b.log
    redis_bench_serve "$build/promptcache" $((port + 2)) "$log" 256
    b_pid=$served
    wait_listening "$log"
    B=http://127.0.0.1:$((port + 2)) BUILD=$build ROUND=$round node - <<'EOF'
const { B, BUILD, ROUND } = process.env;
const words = 'the quick brown fox jumps over a lazy dog while seven small birds sing about rivers'.split(' ');
let prefix = '';
for (let i = 0; prefix.split(' ').length < 3300; i++) prefix += words[(i * 7) % words.length] + ' ';
const post = (body) => fetch(B + '/v1/completions', { method: 'POST',
  headers: { 'content-type': 'application/json' }, body: JSON.stringify({ model: 'smollm2-135m-q8_0', temperature: 0, ...body }) });
await (await post({ prompt: 'A first request: a replica in service has served traffic.', max_tokens: 4 })).json();
// The stream: its tokens' arrival times.
const times = [];
const stream = (async () => {
  const r = await post({ prompt: 'Once upon a time, in a small town by the sea,', max_tokens: 400,
    ignore_eos: true, stream: true });
  const reader = r.body.getReader();
  for (;;) {
    const { done, value } = await reader.read();
    if (done) break;
    const n = (new TextDecoder().decode(value).match(/"text"/g) || []).length;
    for (let i = 0; i < n; i++) times.push(performance.now());
  }
})();
while (times.length < 40) await new Promise((r) => setTimeout(r, 5));
const t0 = performance.now();
const res = await (await post({ prompt: prefix + `Ending ${ROUND}.`, max_tokens: 1 })).json();
const t1 = performance.now();
await stream;
const gaps = [];
for (let i = 1; i < times.length; i++) gaps.push([times[i - 1], times[i] - times[i - 1]]);
const during = gaps.filter(([at, g]) => at + g >= t0 && at <= t1).map(([, g]) => g);
const all = gaps.map(([, g]) => g).sort((a, b) => a - b);
const out = { build: BUILD, round: Number(ROUND), stall_max_ms: Math.max(...during),
  gap_median_ms: all[Math.floor(all.length / 2)], lookup_wall_ms: t1 - t0,
  ttft_ms: res.timings.ttft_ms, remote_ms: res.timings.remote_ms ?? null,
  cached_tokens: res.usage.prompt_tokens_details.cached_tokens, prompt_tokens: res.usage.prompt_tokens };
console.log(JSON.stringify(out));
EOF
    kill "$b_pid"; wait "$b_pid" 2>/dev/null || true
  done
done
