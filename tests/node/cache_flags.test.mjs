// The prefix cache's flags through the real server: what each one promises, seen by a client in
// `cached_tokens` and by an operator in /metrics, with the output unchanged.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { startServer, waitFor, MODEL, STORY, BLOCK } from './server.mjs';

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

async function complete(server, prompt, max_tokens = 8) {
  return server.client().completions.create({ model: MODEL, prompt, max_tokens, temperature: 0, ignore_eos: true });
}

const cached = (r) => r.usage.prompt_tokens_details.cached_tokens;

test('--cache-min-tokens: shorter prompts are not cached, longer ones are', async () => {
  const s = await startServer(['--cache-min-tokens', '100']);
  const short = 'Once upon a time, there was a little girl named Lily. She loved to play.';
  const n = (await s.tokenize({ prompt: short })).length;
  assert.ok(n < 100 && n > BLOCK, `short prompt: ${n} tokens`);
  await complete(s, short);
  assert.equal(cached(await complete(s, short)), 0);
  await complete(s, STORY);
  assert.ok(cached(await complete(s, STORY)) > 0);
});

test('--cache-granularity: cached prefixes come in multiples of it', async () => {
  const s = await startServer(['--cache-granularity', String(4 * BLOCK)]);
  const first = await complete(s, STORY);
  const second = await complete(s, STORY + ' The end.');
  assert.equal(cached(first), 0);
  assert.ok(cached(second) > 0);
  assert.equal(cached(second) % (4 * BLOCK), 0, `cached ${cached(second)}`);
  assert.equal(second.choices[0].text, (await startServer(['--no-prefix-cache']).then((u) => complete(u, STORY + ' The end.'))).choices[0].text);
});

test('--cache-ttl: a prefix idle longer than the TTL is gone', async () => {
  const s = await startServer(['--cache-ttl', '1']);
  await complete(s, STORY);
  assert.ok(cached(await complete(s, STORY)) > 0, 'reused within the TTL');
  await sleep(1600);
  assert.equal(cached(await complete(s, STORY)), 0, 'expired after 1.6 s idle');
});

test('--cache-ram: eviction under live load keeps the budget and the output', async () => {
  // 64 KiB holds six blocks of stories260K (10 KiB each): far less than 8 clients' prompts.
  const s = await startServer(['--cache-ram', '0.0625', '--parallel', '4']);
  const reference = await startServer(['--no-prefix-cache']);
  const prompts = Array.from({ length: 8 }, (_, i) => `Day ${i + 1}. ${STORY}`);
  const expected = [];
  for (const p of prompts) expected.push((await complete(reference, p, 12)).choices[0].text);
  for (let round = 0; round < 3; round++) {
    const got = await Promise.all(prompts.map((p) => complete(s, p, 12)));
    got.forEach((r, i) => assert.equal(r.choices[0].text, expected[i], `round ${round}, prompt ${i}`));
    // Blocks the running requests hold cannot be evicted, and a client may read the metrics
    // before the engine's turn that ended its request has evicted and taken its snapshot: the
    // budget holds in the first snapshot with no request running (the same turn evicts).
    let m;
    assert.ok(await waitFor(async () => (m = await s.metrics()).promptcache_requests_active === 0));
    assert.ok(m['promptcache_cache_bytes{tier="ram"}'] <= 0.0625 * 1024 * 1024, `ram ${m['promptcache_cache_bytes{tier="ram"}']}`);
  }
  assert.ok((await s.metrics()).promptcache_cache_evictions_total > 0);
});

test('--cache-disk: the disk tier keeps to its budget, oldest files first', async (t) => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'promptcache-disk-budget-'));
  t.after(() => fs.rmSync(dir, { recursive: true, force: true }));
  // 0.1 MiB of disk: about ten block files; the RAM budget is smaller still, so blocks move out.
  const s = await startServer(['--cache-dir', dir, '--cache-disk', '0.1', '--cache-ram', '0.03']);
  for (let i = 0; i < 12; i++) await complete(s, `Day ${i + 1}. ${STORY}`);
  await s.json('POST', '/v1/cache/save', {});
  const m = await s.metrics();
  assert.ok(m.promptcache_cache_disk_writes_total > 10, `writes ${m.promptcache_cache_disk_writes_total}`);
  assert.ok(m['promptcache_cache_bytes{tier="disk"}'] <= 0.1 * 1024 * 1024, `disk ${m['promptcache_cache_bytes{tier="disk"}']}`);
  let bytes = 0;
  for (const sub of fs.readdirSync(dir)) {
    const folder = path.join(dir, sub);
    if (!fs.statSync(folder).isDirectory()) continue;
    for (const f of fs.readdirSync(folder)) if (f.endsWith('.kvb')) bytes += fs.statSync(path.join(folder, f)).size;
  }
  assert.ok(bytes > 0 && bytes <= 0.1 * 1024 * 1024, `files hold ${bytes} bytes`);
  // The newest prompt is still a hit after a restart.
  await s.stop();
  const again = await startServer(['--cache-dir', dir, '--cache-disk', '0.1']);
  assert.ok(cached(await complete(again, `Day 12. ${STORY}`)) > 0);
});
