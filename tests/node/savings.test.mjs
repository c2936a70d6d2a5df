// POST /v1/bench/savings, what the web page's Savings panel draws: the measurements of
// `promptcache bench --plot` run by the server on its own model. Checks the shape and the exact
// parts (lengths, K/V bytes from the model's layout, cleanup of the temporary schemas); the
// times themselves are measured, so only their being positive is checked.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { startServer } from './server.mjs';

test('the server measures generation, time to first token and K/V bytes per token', async () => {
  const s = await startServer();
  const r = await s.json('POST', '/v1/bench/savings', { max_tokens: 32, max_prompt: 64 });
  assert.equal(r.status, 200, r.text);
  const j = r.body;
  assert.equal(j.object, 'bench.savings');
  assert.deepEqual(j.generation.map((g) => g.tokens), [16, 32]);
  for (const g of j.generation) assert.ok(g.with_cache_ms > 0 && g.no_cache_ms > 0, JSON.stringify(g));
  const lengths = j.ttft.map((t) => t.prompt_tokens);
  assert.deepEqual(lengths, [16, 32, 48, 64]);
  for (const t of j.ttft) {
    assert.ok(t.cold_ms > 0 && t.prefix_hit_ms > 0 && t.modules_ms > 0, JSON.stringify(t));
    assert.ok(t.modules_prompt_tokens > 16, 'the modular prompt holds the modules and new text');
  }
  const meta = (await s.json('GET', '/v1/models')).body.data[0].meta;
  assert.equal(j.kv_type, 'f16');
  assert.equal(j.kv_bytes_per_token.f16, meta.kv_bytes_per_token);
  assert.equal(j.kv_bytes_per_token.f32, 2 * meta.kv_bytes_per_token);
  // The temporary schemas are gone.
  const schemas = (await s.json('GET', '/v1/schemas')).body.data;
  assert.deepEqual(schemas.filter((x) => x.name.startsWith('_savings')), []);
  // An empty body takes the defaults (64 tokens: four lengths).
  const d = await s.json('POST', '/v1/bench/savings', '');
  assert.equal(d.status, 200, d.text);
  assert.equal(d.body.generation.at(-1).tokens, 64);
  await s.stop();
});

test('bad bodies are 400s naming the field; tenants may not run it', async (t) => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'promptcache-savings-'));
  t.after(() => fs.rmSync(dir, { recursive: true, force: true }));
  fs.writeFileSync(path.join(dir, 'keys'), 'key-bob bob\n');
  const s = await startServer(['--api-keys', path.join(dir, 'keys'), '--api-key', 'admin-key']);
  const admin = { authorization: 'Bearer admin-key' };
  for (const [body, param] of [[{ max_tokens: 0 }, 'max_tokens'], [{ max_tokens: 1000 }, 'max_tokens'],
                               [{ max_prompt: 'long' }, 'max_prompt'], [{ depth: 4 }, 'depth']]) {
    const r = await s.json('POST', '/v1/bench/savings', body, admin);
    assert.equal(r.status, 400, r.text);
    assert.equal(r.body.error.param, param);
  }
  assert.equal((await s.json('POST', '/v1/bench/savings', '{"max_tokens":', admin)).status, 400);
  assert.equal((await s.json('POST', '/v1/bench/savings', [1], admin)).status, 400);
  const bob = await s.json('POST', '/v1/bench/savings', {}, { authorization: 'Bearer key-bob' });
  assert.equal(bob.status, 403, bob.text);
  assert.equal((await s.json('GET', '/v1/bench/savings', undefined, admin)).status, 405);
  await s.stop();
});
