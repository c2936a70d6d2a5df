// --kv-type q8_0 / q4_0 through the real server: the type and its bytes are reported, prefix hits
// give the same greedy output as no cache at all, the disk tier keeps each type's blocks apart
// (a server of another type on the same --cache-dir finds none of them), and a bad value is one
// line naming the flag.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { startServer, MODEL, STORY } from './server.mjs';

async function complete(server, prompt, max_tokens = 12) {
  return server.client().completions.create({ model: MODEL, prompt, max_tokens, temperature: 0, ignore_eos: true });
}
const cached = (r) => r.usage.prompt_tokens_details.cached_tokens;

test('q8_0: reported in /v1/models and /metrics, and prefix hits answer as no cache does', async () => {
  const s = await startServer(['--kv-type', 'q8_0']);
  const meta = (await s.json('GET', '/v1/models')).body.data[0].meta;
  assert.equal(meta.kv_type, 'q8_0');
  // stories260K: 5 layers x (K, V) x one 34-byte block for its 4 KV heads of 8.
  assert.equal(meta.kv_bytes_per_token, 340);
  const cold = await complete(s, STORY);
  const hit = await complete(s, STORY);
  assert.equal(cached(cold), 0);
  assert.ok(cached(hit) > 0);
  assert.equal(hit.choices[0].text, cold.choices[0].text);
  const plain = await startServer(['--kv-type', 'q8_0', '--no-prefix-cache']);
  assert.equal((await complete(plain, STORY)).choices[0].text, cold.choices[0].text);
  const bytes = (await s.metrics())['promptcache_kv_bytes_in_use'];
  assert.ok(bytes > 0 && bytes % (16 * 340) === 0, `kv bytes in use ${bytes}`);
});

test('q4_0 blocks on disk come back after a restart; an f16 server on the same folder finds none', async () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'pc-kvtypes-'));
  try {
    const a = await startServer(['--kv-type', 'q4_0', '--cache-dir', dir]);
    const fingerprint = (await a.json('GET', '/v1/models')).body.data[0].meta.fingerprint;
    const cold = await complete(a, STORY);
    assert.equal((await a.json('POST', '/v1/cache/save')).status, 200);
    await a.stop();
    assert.ok(fs.readdirSync(path.join(dir, `${fingerprint}-q4_0`)).some((f) => f.endsWith('.kvb')));
    const f16 = await startServer(['--cache-dir', dir]);
    assert.equal(cached(await complete(f16, STORY)), 0);
    await f16.stop();
    const b = await startServer(['--kv-type', 'q4_0', '--cache-dir', dir]);
    const again = await complete(b, STORY);
    assert.ok(cached(again) > 0);
    assert.equal(again.choices[0].text, cold.choices[0].text);
  } finally {
    fs.rmSync(dir, { recursive: true, force: true });
  }
});

test('a bad --kv-type is one line naming the choices', async () => {
  await assert.rejects(startServer(['--kv-type', 'q5_0']), /--kv-type must be f16, f32, q8_0 or q4_0, not 'q5_0'/);
});
