#!/usr/bin/env bash
# Two replicas on one Redis (docs/benchmarks.md, "Replicas on one Redis"): a ~3,300-token prefix
# computed on replica A, then requested with new endings on A (warm, from RAM) and on replica B
# (from Redis); then Redis killed in the middle of a run of requests to both replicas.
#   scripts/bench_redis.sh [BUILD_DIR]   (default build; writes into /tmp/pc-bench-redis)
# REPEAT: rounds of warm / from-Redis requests (default 5; medians reported).
# SERVE_ARGS adds flags to both replicas' serve commands (e.g. SERVE_ARGS="--kv-prefault").
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
bin=$build/promptcache
# shellcheck source=bench_lib.sh
source scripts/bench_lib.sh
redis_bench_setup /tmp/pc-bench-redis "$bin"
serve() {  # serve PORT LOG
  # shellcheck disable=SC2086
  "$bin" serve -m "$model" -t 2 -c 4096 --port "$1" --cache-redis "redis://127.0.0.1:$port" \
    --cache-ram 256 ${SERVE_ARGS:-} 2>"$2" &
  pids+=($!)
}
serve $((port + 1)) "$work/a.log"
serve $((port + 2)) "$work/b.log"
for log in "$work/a.log" "$work/b.log"; do
  for _ in $(seq 100); do grep -q listening "$log" && break; sleep 0.2; done
done
A=http://127.0.0.1:$((port + 1)) B=http://127.0.0.1:$((port + 2)) node - <<'EOF'
const words = 'the quick brown fox jumps over a lazy dog while seven small birds sing about rivers'.split(' ');
let prefix = '';
for (let i = 0; prefix.split(' ').length < 3300; i++) prefix += words[(i * 7) % words.length] + ' ';
const ask = async (url, prompt) => {
  const r = await fetch(url + '/v1/completions', { method: 'POST', headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ model: 'smollm2-135m-q8_0', prompt, max_tokens: 4, temperature: 0, ignore_eos: true }) });
  if (r.status !== 200) throw new Error(`${r.status} ${await r.text()}`);
  return (await r.json());
};
const { A, B } = process.env;
const repeat = Number(process.env.REPEAT || 5);
const cold = await ask(A, prefix + 'Ending one.');
await ask(B, 'An unrelated request: B has served traffic before, as a replica in service has.');
await new Promise((r) => setTimeout(r, 3000));  // A's writer sends the blocks to Redis
// Each round: a new ending on A (its prefix in RAM), then on B after B's RAM tier is emptied
// (DELETE /v1/cache leaves Redis alone), so every B request loads the prefix from Redis.
const warm = [], remote = [];
for (let i = 0; i < repeat; i++) {
  warm.push(await ask(A, prefix + `Ending two, take ${i}.`));
  const d = await fetch(B + '/v1/cache', { method: 'DELETE' });
  if (d.status !== 200) throw new Error(`DELETE /v1/cache: ${d.status}`);
  remote.push(await ask(B, prefix + `Ending three, take ${i}.`));
}
const ms = (rs) => rs.map((r) => r.timings.ttft_ms);
const median = (xs) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];
const t = (r) => `(prompt ${r.usage.prompt_tokens}, cached ${r.usage.prompt_tokens_details.cached_tokens})`;
const list = (xs) => xs.map((x) => x.toFixed(0)).join(', ');
const w = median(ms(warm)), b = median(ms(remote));
console.log(`A cold:        ${cold.timings.ttft_ms.toFixed(0)} ms ${t(cold)}`);
console.log(`A warm (RAM):  median ${w.toFixed(0)} ms of ${list(ms(warm))} ${t(warm[0])}`);
console.log(`B from Redis:  median ${b.toFixed(0)} ms of ${list(ms(remote))} ${t(remote[0])}`);
console.log(`B / A warm: ${(b / w).toFixed(2)}x; cold / B: ${(cold.timings.ttft_ms / b).toFixed(1)}x`);
console.log(JSON.stringify({ cold: cold.timings.ttft_ms, warm: ms(warm), remote: ms(remote) }));
EOF
# Redis killed mid-run: 20 requests alternating between the replicas, Redis gone after the 8th.
A=http://127.0.0.1:$((port + 1)) B=http://127.0.0.1:$((port + 2)) REDIS_PID=$redis node - <<'EOF'
const { A, B, REDIS_PID } = process.env;
let failed = 0, ok = 0;
for (let i = 0; i < 20; i++) {
  if (i === 8) process.kill(Number(REDIS_PID), 'SIGKILL');
  const r = await fetch((i % 2 ? B : A) + '/v1/completions', { method: 'POST', headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ model: 'smollm2-135m-q8_0', prompt: `Request ${i % 5}: the fox and the dog.`, max_tokens: 8, temperature: 0 }) });
  r.status === 200 ? ok++ : failed++;
}
const m = await (await fetch(A + '/metrics')).text();
const errs = m.split('\n').find((l) => l.startsWith('promptcache_cache_tier_errors_total'));
console.log(`Redis killed after request 8 of 20: ${ok} answered, ${failed} failed; A: ${errs}`);
EOF
