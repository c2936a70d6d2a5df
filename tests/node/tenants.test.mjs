// Tenant isolation: two tenants (--api-keys) or two cache_salt values with the same prompt share
// nothing (cached_tokens 0 for the second), in RAM and through Redis across replicas; the same
// tenant and salt still hit. A router's view: POST /v1/cache/lookup says how much of a prompt
// each tier holds, per namespace, computing nothing.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { startServer, MODEL, STORY, expectedCached, waitFor } from './server.mjs';
import { startRedis } from './redis.mjs';

const PROMPT = STORY + ' The end of the tale.';

function keysFile(t) {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'promptcache-tenants-'));
  t.after(() => fs.rmSync(dir, { recursive: true, force: true }));
  const file = path.join(dir, 'keys');
  fs.writeFileSync(file, '# tenants\nkey-alice alice\nkey-alice-2 alice\nkey-bob bob\n');
  return file;
}

async function complete(server, key, extra = {}) {
  const c = server.client({ apiKey: key });
  return c.completions.create({ model: MODEL, prompt: PROMPT, max_tokens: 8, temperature: 0, ignore_eos: true, ...extra });
}

const cached = (r) => r.usage.prompt_tokens_details.cached_tokens;

test('tenants and cache_salt share no cached prefix; the same namespace does', async (t) => {
  const server = await startServer(['--api-keys', keysFile(t), '--api-key', 'admin-key']);
  const tokens = (await fetch(`${server.url}/tokenize`, {
    method: 'POST', headers: { authorization: 'Bearer key-bob', 'content-type': 'application/json' },
    body: JSON.stringify({ prompt: PROMPT }),
  }).then((r) => r.json())).tokens;
  const full = expectedCached(tokens.length, tokens.length);

  const a1 = await complete(server, 'key-alice');
  assert.equal(cached(a1), 0);
  const b1 = await complete(server, 'key-bob');
  assert.equal(cached(b1), 0, "bob does not reuse alice's prefix");
  assert.equal(b1.choices[0].text, a1.choices[0].text);
  const a2 = await complete(server, 'key-alice-2');  // another key of the same tenant
  assert.equal(cached(a2), full, 'the same tenant reuses its prefix');
  // The admin key is the default namespace: it shares nothing with the tenants either.
  assert.equal(cached(await complete(server, 'admin-key')), 0);

  // cache_salt splits one tenant further; the same salt hits.
  assert.equal(cached(await complete(server, 'key-alice', { cache_salt: 'conversation-1' })), 0);
  assert.ok(cached(await complete(server, 'key-alice-2', { cache_salt: 'conversation-1' })) > 0);
  assert.equal(cached(await complete(server, 'key-alice', { cache_salt: 'conversation-2' })), 0);

  // Wrong key: 401. Routes over every tenant's cache: the admin key only.
  await assert.rejects(complete(server, 'nobody'), (e) => e.status === 401);
  const list = (key) => fetch(`${server.url}/v1/cache`, { headers: { authorization: `Bearer ${key}` } });
  assert.equal((await list('key-bob')).status, 403);
  assert.equal((await list('admin-key')).status, 200);
  // A bad salt is a 400 naming the field.
  await assert.rejects(complete(server, 'key-bob', { cache_salt: '' }), (e) => e.status === 400);
});

test('without --api-keys, cache_salt still isolates', async () => {
  const server = await startServer([]);
  const c = (extra) => server.client().completions.create({ model: MODEL, prompt: PROMPT, max_tokens: 4, temperature: 0, ...extra });
  await c({});
  assert.equal(cached(await c({ cache_salt: 's1' })), 0);
  assert.ok(cached(await c({ cache_salt: 's1' })) > 0);
  assert.ok(cached(await c({})) > 0);
});

test('tenants share nothing through Redis either; the lookup endpoint sees each tier', async (t) => {
  const redis = await startRedis();
  t.after(() => redis.cleanup());
  const file = keysFile(t);
  const args = ['--api-keys', file, '--cache-secret', 'a-secret-both-replicas-share',
                '--cache-redis', redis.url];
  const [a, b] = await Promise.all([startServer(args), startServer(args)]);
  const lookup = async (server, key, body) => {
    const r = await fetch(`${server.url}/v1/cache/lookup`, {
      method: 'POST', headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
      body: JSON.stringify(body),
    });
    assert.equal(r.status, 200);
    return r.json();
  };
  const before = await lookup(b, 'key-alice', { prompt: PROMPT });
  assert.equal(before.cached_tokens, 0);
  assert.ok(before.prompt_tokens > 100);

  const cold = await complete(a, 'key-alice');
  const n = before.prompt_tokens;
  // Once A's writer has sent them, B sees alice's blocks in Redis (not in RAM), bob sees none.
  assert.ok(await waitFor(async () => (await lookup(b, 'key-alice', { prompt: PROMPT })).tiers.remote >= expectedCached(n, n)));
  const view = await lookup(b, 'key-alice', { prompt: PROMPT });
  assert.deepEqual(view.tiers, { ram: 0, disk: 0, remote: view.tiers.remote });
  assert.equal(view.cached_tokens, expectedCached(n, n));
  assert.equal((await lookup(b, 'key-bob', { prompt: PROMPT })).cached_tokens, 0);
  assert.equal((await lookup(a, 'key-alice', { prompt: PROMPT })).tiers.ram >= expectedCached(n, n), true);

  assert.equal(cached(await complete(b, 'key-bob')), 0, "bob finds nothing of alice's in Redis");
  const warm = await complete(b, 'key-alice-2');
  assert.equal(cached(warm), expectedCached(n, n), 'alice finds hers on the other replica');
  assert.equal(warm.choices[0].text, cold.choices[0].text);
  // Chat messages work too.
  const chat = await lookup(b, 'key-alice', { messages: [{ role: 'user', content: 'Hi' }] });
  assert.equal(chat.cached_tokens, 0);
});
