// Explicit cache control: pinning through cache_control breakpoints and the `cache` field, and the
// /v1/cache endpoints (list, load, pin, unpin, save, drop).
import { test } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { startServer, MODEL, STORY, BLOCK, commonPrefix, expectedCached } from './server.mjs';

const cachedTokens = (r) => r.usage.prompt_tokens_details.cached_tokens;

test('a cache_control breakpoint pins the prefix up to its message', async () => {
  const s = await startServer();
  const client = s.client();
  const system = { role: 'system', content: STORY, cache_control: { type: 'ephemeral' } };
  const messages = [system, { role: 'user', content: 'What did Lily see?' }];
  const pinned = await s.tokenize({ messages, add_generation_prompt: true });
  const r = await s.json('POST', '/tokenize', { messages, add_generation_prompt: true });
  const pinTokens = r.body.pin_tokens;
  assert.ok(pinTokens > 10 * BLOCK && pinTokens < pinned.length, `the breakpoint covers ${pinTokens} tokens`);

  await client.chat.completions.create({ model: MODEL, messages, max_tokens: 4, temperature: 0 });
  await client.completions.create({ model: MODEL, prompt: 'A story about a frog.', max_tokens: 4 });
  const dropped = await s.json('DELETE', '/v1/cache');
  assert.equal(dropped.status, 200, dropped.text);

  // The unpinned prompt is gone; the pinned system prompt is still there.
  const frog = await client.completions.create({ model: MODEL, prompt: 'A story about a frog.', max_tokens: 4 });
  assert.equal(cachedTokens(frog), 0);
  const other = [{ role: 'system', content: STORY }, { role: 'user', content: 'Who played with the dog?' }];
  const otherTokens = await s.tokenize({ messages: other, add_generation_prompt: true });
  const hit = await client.chat.completions.create({ model: MODEL, messages: other, max_tokens: 4, temperature: 0 });
  const shared = Math.min(pinTokens, commonPrefix(pinned, otherTokens));
  assert.equal(cachedTokens(hit), expectedCached(shared, otherTokens.length));
});

test('the cache field pins a whole prompt; load, pin, unpin and drop by key', async () => {
  const s = await startServer();
  const client = s.client();
  const prompt = STORY + ' The end.';
  const tokens = await s.tokenize({ prompt });

  // load: computes the prefix without generating.
  let r = await s.json('POST', '/v1/cache/load', { prompt });
  assert.equal(r.status, 200, r.text);
  assert.equal(r.body.prompt_tokens, tokens.length);
  assert.equal(r.body.cached_tokens, 0);
  const again = await client.completions.create({ model: MODEL, prompt, max_tokens: 2 });
  assert.equal(cachedTokens(again), expectedCached(tokens.length, tokens.length));

  // The list has the chain; pin it by its tokens, drop the rest, and it survives.
  r = await s.json('GET', '/v1/cache');
  assert.equal(r.status, 200);
  assert.equal(r.body.object, 'list');
  assert.ok(r.body.data.length >= 1);
  for (const e of r.body.data) {
    assert.match(e.key, /^[0-9a-f]{32}$/);
    assert.equal(typeof e.tokens, 'number');
    assert.equal(e.in_ram, true);
  }
  r = await s.json('POST', '/v1/cache/pin', { prompt });
  assert.equal(r.status, 200, r.text);
  assert.equal((await s.json('DELETE', '/v1/cache')).status, 200);
  assert.equal(cachedTokens(await client.completions.create({ model: MODEL, prompt, max_tokens: 2 })),
    expectedCached(tokens.length, tokens.length));
  // Unpinned, it goes with the next drop.
  assert.equal((await s.json('POST', '/v1/cache/unpin', { prompt })).status, 200);
  assert.equal((await s.json('DELETE', '/v1/cache')).status, 200);
  assert.equal(cachedTokens(await client.completions.create({ model: MODEL, prompt, max_tokens: 2 })), 0);

  // "cache": {"pin": true} on a completion pins its prompt.
  const pinnedPrompt = STORY + ' Lily had a cat too.';
  const pinnedTokens = await s.tokenize({ prompt: pinnedPrompt });
  await s.json('POST', '/v1/completions', { model: MODEL, prompt: pinnedPrompt, max_tokens: 2, cache: { pin: true } });
  assert.equal((await s.json('DELETE', '/v1/cache')).status, 200);
  assert.equal(cachedTokens(await client.completions.create({ model: MODEL, prompt: pinnedPrompt, max_tokens: 2 })),
    expectedCached(pinnedTokens.length, pinnedTokens.length));

  // Drop one entry by key; unknown and malformed keys.
  await client.completions.create({ model: MODEL, prompt: 'A frog sat on a big green leaf near the pond all day long.', max_tokens: 2 });
  const list = (await s.json('GET', '/v1/cache')).body.data;
  const victim = list.find((e) => !e.pinned);
  assert.ok(victim);
  r = await s.json('DELETE', `/v1/cache/${victim.key}`);
  assert.equal(r.status, 200, r.text);
  assert.ok(!(await s.json('GET', '/v1/cache')).body.data.some((e) => e.key === victim.key));
  r = await s.json('DELETE', `/v1/cache/${victim.key}`);
  assert.equal(r.status, 404, r.text);
  assert.ok(r.body.error);
  r = await s.json('DELETE', '/v1/cache/not-a-key');
  assert.equal(r.status, 400, r.text);
  // Pinning what is not cached, and bad bodies.
  r = await s.json('POST', '/v1/cache/pin', { prompt: 'Never seen before, this text is long enough for a block.' });
  assert.equal(r.status, 404, r.text);
  assert.equal((await s.json('POST', '/v1/cache/load', { nothing: true })).status, 400);
  assert.equal((await s.json('POST', '/v1/cache/load', '{bad json')).status, 400);
  // save needs a disk tier.
  r = await s.json('POST', '/v1/cache/save');
  assert.equal(r.status, 400, r.text);
  assert.match(r.body.error.message, /cache-dir/);
});

test('save writes the cache to the disk tier', async (t) => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'promptcache-save-'));
  t.after(() => fs.rmSync(dir, { recursive: true, force: true }));
  const s = await startServer(['--cache-dir', dir]);
  await s.client().completions.create({ model: MODEL, prompt: STORY, max_tokens: 2 });
  const r = await s.json('POST', '/v1/cache/save');
  assert.equal(r.status, 200, r.text);
  const list = (await s.json('GET', '/v1/cache')).body.data;
  assert.ok(list.some((e) => e.on_disk), JSON.stringify(list));
  const m = await s.metrics();
  assert.ok(m['promptcache_cache_bytes{tier="disk"}'] > 0);
  assert.ok(m.promptcache_cache_disk_writes_total > 0);
});
