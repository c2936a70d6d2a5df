#!/usr/bin/env bash
# Do a burst's Redis lookups wait for each other? (docs/benchmarks.md, "A burst of Redis
# lookups"). Replica A computes 4 different ~3,000-token prefixes into Redis; then, round by
# round, a fresh replica B (its RAM empty, so the prefixes come from Redis) is sent 4 requests at
# once, one per prefix with a new ending, max_tokens 1. Reported per request: its time to first
# token (the server's timings.ttft_ms, from its arrival), remote_ms (its wait for its lookup) and
# cached_tokens; and the burst's wall time (the client's, first request sent to last answer).
# Each build given is run in turn, round by round, on the same Redis contents (the binaries must
# share the KV format); a build may carry serve flags of its own after an @:
#   scripts/bench_redis_fetch_burst.sh BUILD_DIR[@FLAGS] [BUILD_DIR[@FLAGS]...]
#   e.g. ... /tmp/old-build build build@--cache-redis-readers=1   (writes into /tmp/pc-bench-burst)
# REPEAT: rounds per build (default 3). DELAY_MS: Redis reached through a proxy that holds each
# chunk it forwards this long (default 2; 0: loopback as it is). SERVE_ARGS: more serve flags
# for both replicas.
set -euo pipefail
cd "$(dirname "$0")/.."
(($# >= 1)) || { echo "usage: $0 BUILD_DIR[@FLAGS] [BUILD_DIR[@FLAGS]...]" >&2; exit 2; }
# shellcheck source=bench_lib.sh
source scripts/bench_lib.sh
redis_bench_setup /tmp/pc-bench-burst "${1%%@*}/promptcache"
delay=${DELAY_MS:-2}
redis_bench_link "$delay"
# The 4 prefixes: each starts with its own number and words in an order of its own, so that no
# block of one is a block of another.
export LIB=$work/burst.mjs
cat >"$LIB" <<'EOF'
const words = 'the quick brown fox jumps over a lazy dog while seven small birds sing about rivers'.split(' ');
export const prefix = (k) => {
  let p = `Document ${k}: `;
  for (let i = 0; p.split(' ').length < 3000; i++) p += words[(i * (k + 2) + k) % words.length] + ' ';
  return p;
};
export const post = (url, body) => fetch(url + '/v1/completions', { method: 'POST',
  headers: { 'content-type': 'application/json' },
  body: JSON.stringify({ model: 'smollm2-135m-q8_0', temperature: 0, ...body }) });
EOF
redis_bench_serve "${1%%@*}/promptcache" $((port + 1)) "$work/a.log" 512
a_pid=$served
wait_listening "$work/a.log"
A=http://127.0.0.1:$((port + 1)) node --input-type=module - <<'EOF'
const { prefix, post } = await import(process.env.LIB);
for (let k = 0; k < 4; k++) {
  const r = await post(process.env.A, { prompt: prefix(k) + 'Ending one.', max_tokens: 1 });
  if (r.status !== 200) throw new Error(`${r.status} ${await r.text()}`);
  const j = await r.json();
  console.error(`A computed prefix ${k}: ${j.usage.prompt_tokens} tokens`);
}
await new Promise((res) => setTimeout(res, 5000));  // A's writer sends the blocks to Redis
EOF
kill "$a_pid"; wait "$a_pid" 2>/dev/null || true
echo "# $(machine); load $(load); DELAY_MS=$delay; $(date -u +%FT%TZ)" >&2
rounds=${REPEAT:-3}
for ((round = 0; round < rounds; round++)); do
  for spec in "$@"; do
    build=${spec%%@*}
    flags=""
    [[ $spec == *@* ]] && flags=${spec#*@}
    log=$work/b.log
    redis_bench_serve "$build/promptcache" $((port + 2)) "$log" 512 "$flags"
    b_pid=$served
    wait_listening "$log"
    B=http://127.0.0.1:$((port + 2)) SPEC=$spec ROUND=$round node --input-type=module - <<'EOF'
const { prefix, post } = await import(process.env.LIB);
const { B, SPEC, ROUND } = process.env;
await (await post(B, { prompt: 'A first request: a replica in service has served traffic.', max_tokens: 4 })).json();
const t0 = performance.now();
const res = await Promise.all([0, 1, 2, 3].map(async (k) => {
  const r = await (await post(B, { prompt: prefix(k) + `Ending ${ROUND}.`, max_tokens: 1 })).json();
  return { k, client_ms: performance.now() - t0, ttft_ms: r.timings.ttft_ms,
    remote_ms: r.timings.remote_ms ?? null, cached_tokens: r.usage.prompt_tokens_details.cached_tokens,
    prompt_tokens: r.usage.prompt_tokens };
}));
const wall_ms = performance.now() - t0;
console.log(JSON.stringify({ build: SPEC, round: Number(ROUND), wall_ms,
  ttft_ms: res.map((r) => r.ttft_ms), remote_ms: res.map((r) => r.remote_ms),
  cached_tokens: res.map((r) => r.cached_tokens), prompt_tokens: res.map((r) => r.prompt_tokens) }));
EOF
    kill "$b_pid"; wait "$b_pid" 2>/dev/null || true
  done
done
