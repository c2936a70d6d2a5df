// The remote tier with a real redis-server and two real replicas (--cache-redis): a prefix one
// computes is served to the other from Redis, with the same greedy output; a corrupted or foreign
// value is skipped and counted; Redis killed mid-run costs no request, and when it is back the
// replicas use it again; a schema's modules one replica encoded are read by the other, and a
// router's lookup of a PML prompt on it counts those only Redis holds in tiers.remote.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { startServer, MODEL, STORY, expectedCached, waitFor } from './server.mjs';
import { startRedis, command } from './redis.mjs';

const R = 'tier="remote"';
const metric = (m, name) => m[`promptcache_cache_tier_${name}_total{${R}}`] ?? 0;

async function complete(server, prompt, extra = {}) {
  return server.client().completions.create({
    model: MODEL, prompt, max_tokens: 12, temperature: 0, ignore_eos: true, ...extra,
  });
}

// Waits until the replica's writer has sent at least `n` blocks.
async function written(server, n) {
  assert.ok(await waitFor(async () => metric(await server.metrics(), 'writes') >= n),
    `the replica wrote ${n} blocks to Redis`);
}

// Registers a schema (POST /v1/schemas); returns what its load encoded and found.
async function register(server, xml) {
  const r = await server.json('POST', '/v1/schemas', xml, { 'content-type': 'application/xml' });
  assert.equal(r.status, 200, r.text);
  return r.body.load;
}

const examples = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../../examples/story');

async function replicas(redis, extra = []) {
  const args = ['--cache-redis', redis.url, '--cache-redis-timeout', '200', ...extra];
  return Promise.all([startServer(args), startServer(args)]);
}

test('a prefix computed on replica A is served from Redis on replica B', async (t) => {
  const redis = await startRedis();
  t.after(() => redis.cleanup());
  const [a, b] = await replicas(redis);
  const prompt = STORY + ' Lily had a new idea.';
  const tokens = await a.tokenize({ prompt });
  const blocks = Math.floor(tokens.length / 16);

  const cold = await complete(a, prompt);
  assert.equal(cold.usage.prompt_tokens_details.cached_tokens, 0);
  await written(a, blocks);
  const keys = await command(redis.port, 'KEYS', 'pc:*');
  assert.ok(keys.length >= blocks, `${keys.length} keys for ${blocks} prompt blocks (generated tokens too)`);
  for (const k of keys) {
    assert.match(k.toString(), /^pc:3:[0-9a-f]+:f16:b16:0{32}:[0-9a-f]{32}$/);
    const ttl = await command(redis.port, 'TTL', k);
    assert.ok(ttl > 0 && ttl <= 86400, `expiry set (${ttl})`);
  }

  const warm = await complete(b, prompt);
  assert.equal(warm.usage.prompt_tokens_details.cached_tokens, expectedCached(tokens.length, tokens.length));
  assert.equal(warm.choices[0].text, cold.choices[0].text, 'same greedy output as the fresh computation');
  const mb = await b.metrics();
  assert.ok(metric(mb, 'loads') >= blocks - 1);
  assert.ok(metric(mb, 'hits') >= blocks - 1);
  assert.equal(metric(mb, 'invalid'), 0);
  // B asked only for what it did not have: a second request is served from its RAM.
  const again = await complete(b, prompt);
  assert.equal(again.choices[0].text, cold.choices[0].text);
  assert.equal(metric(await b.metrics(), 'hits'), metric(mb, 'hits'));
});

test('corrupted and foreign values are skipped and counted', async (t) => {
  const redis = await startRedis();
  t.after(() => redis.cleanup());
  const [a, b] = await replicas(redis);
  const prompt = STORY + ' The dog found a stick.';
  const tokens = await a.tokenize({ prompt });
  const cold = await complete(a, prompt);
  await written(a, Math.floor(tokens.length / 16));
  const keys = await command(redis.port, 'KEYS', 'pc:*');
  const values = await Promise.all(keys.map((k) => command(redis.port, 'GET', k)));
  // Every other value gets a flipped byte; the rest hold another key's (valid) value.
  for (let i = 0; i < keys.length; i++) {
    let v = Buffer.from(values[i]);
    if (i % 2 === 0) v[v.length >> 1] ^= 0x5a;
    else v = values[(i + 1) % keys.length];
    assert.equal(await command(redis.port, 'SET', keys[i], v), 'OK');
  }
  const r = await complete(b, prompt);
  assert.equal(r.usage.prompt_tokens_details.cached_tokens, 0);
  assert.equal(r.choices[0].text, cold.choices[0].text);
  const m = await b.metrics();
  assert.ok(metric(m, 'invalid') >= 1, 'the rejected value is counted');
  assert.equal(metric(m, 'loads'), 0);
  // A value that is not a record at all, under a key B will ask for.
  const other = STORY + ' A bird sang.'.repeat(12);  // blocks B has not computed
  const ot = await a.tokenize({ prompt: other });
  await complete(a, other);
  const all = await command(redis.port, 'KEYS', 'pc:*');
  for (const k of all) {
    if (!keys.some((old) => old.equals(k))) await command(redis.port, 'SET', k, 'not a block');
  }
  const r2 = await complete(b, other);
  assert.ok(r2.usage.prompt_tokens_details.cached_tokens < expectedCached(ot.length, ot.length));
  assert.ok(metric(await b.metrics(), 'invalid') >= 2);
});

test('a chain broken in the middle: the blocks before the break are loaded, and the replica stays in step', async (t) => {
  const redis = await startRedis();
  t.after(() => redis.cleanup());
  const [a, b] = await replicas(redis);
  const tokens = await a.tokenize({ prompt: STORY + ' ' + STORY });
  assert.ok(tokens.length >= 12 * 16, `${tokens.length} tokens`);
  // A computes the first three blocks, then the whole prompt; every block after the third is
  // then corrupted, so B's pipelined reads stop at the fourth with more already asked for.
  const head = tokens.slice(0, 3 * 16 + 1);
  await complete(a, head);
  await written(a, 3);
  const headKeys = await command(redis.port, 'KEYS', 'pc:*');
  const cold = await complete(a, tokens);
  await written(a, Math.floor(tokens.length / 16));
  for (const k of await command(redis.port, 'KEYS', 'pc:*')) {
    if (headKeys.some((h) => h.equals(k))) continue;
    const v = Buffer.from(await command(redis.port, 'GET', k));
    v[v.length >> 1] ^= 0x5a;
    assert.equal(await command(redis.port, 'SET', k, v), 'OK');
  }
  const r = await complete(b, tokens);
  assert.equal(r.usage.prompt_tokens_details.cached_tokens, 3 * 16);
  assert.equal(r.choices[0].text, cold.choices[0].text);
  const m = await b.metrics();
  assert.equal(metric(m, 'loads'), 3);
  assert.ok(metric(m, 'invalid') >= 1);
  // The replies still in flight at the break were drained: the next lookup reads its own values.
  const prompt = 'Another day began. ' + STORY;
  const pt = await a.tokenize({ prompt });
  const before = metric(await a.metrics(), 'writes');
  const cold2 = await complete(a, prompt);
  await written(a, before + Math.floor(pt.length / 16));
  const r2 = await complete(b, prompt);
  assert.equal(r2.usage.prompt_tokens_details.cached_tokens, expectedCached(pt.length, pt.length));
  assert.equal(r2.choices[0].text, cold2.choices[0].text);
});

test('quantized K/V (q8_0) through Redis: keys name the type, and B answers as A did', async (t) => {
  const redis = await startRedis();
  t.after(() => redis.cleanup());
  const [a, b] = await replicas(redis, ['--kv-type', 'q8_0']);
  const prompt = STORY + ' The kite flew high.';
  const tokens = await a.tokenize({ prompt });
  const cold = await complete(a, prompt);
  await written(a, Math.floor(tokens.length / 16));
  for (const k of await command(redis.port, 'KEYS', 'pc:*')) {
    assert.match(k.toString(), /^pc:3:[0-9a-f]+:q8_0:b16:/);
  }
  const warm = await complete(b, prompt);
  assert.equal(warm.usage.prompt_tokens_details.cached_tokens, expectedCached(tokens.length, tokens.length));
  assert.equal(warm.choices[0].text, cold.choices[0].text);
  assert.equal(metric(await b.metrics(), 'invalid'), 0);
  // A replica storing f16 shares the store but never reads q8_0 values.
  const f16 = await startServer(['--cache-redis', redis.url]);
  const r = await complete(f16, prompt);
  assert.equal(r.usage.prompt_tokens_details.cached_tokens, 0);
});

test('Redis killed mid-run: both replicas keep answering, and reconnect when it is back', async (t) => {
  const redis = await startRedis();
  t.after(() => redis.cleanup());
  const [a, b] = await replicas(redis);
  const prompts = Array.from({ length: 8 }, (_, i) => `${STORY} Story number ${i} begins here.`);
  let failed = 0;
  const run = (server, p) => complete(server, p).catch(() => { failed++; });
  const wave = [];
  for (let i = 0; i < prompts.length; i++) {
    wave.push(run(i % 2 ? a : b, prompts[i]));
    if (i === 3) {
      await Promise.all(wave);
      await redis.stop();  // SIGKILL, with requests still to come
    }
  }
  await Promise.all(wave);
  // Both replicas, and the prompts the other one computed: all answered, nothing from Redis.
  const after = await Promise.all(prompts.map((p, i) => complete(i % 2 ? b : a, p).catch(() => { failed++; })));
  assert.equal(failed, 0, 'no request failed while Redis was down');
  assert.equal(after.length, prompts.length);
  const [ma, mb] = [await a.metrics(), await b.metrics()];
  assert.ok(metric(ma, 'errors') + metric(mb, 'errors') >= 1, 'the failures are counted');
  assert.equal(ma.promptcache_requests_failed_total ?? 0, 0);
  assert.equal(mb.promptcache_requests_failed_total ?? 0, 0);

  // Back on the same port: after its backoff, replica A writes again (prompts it never saw, so
  // every block is new), and B finds in Redis a prefix only A computed.
  await redis.restart();
  let attempt = 0;
  assert.ok(await waitFor(async () => {
    await complete(a, `Attempt ${attempt++}. ${STORY}`);
    return (await command(redis.port, 'DBSIZE')) > 0;
  }, { timeoutMs: 15000, stepMs: 300 }), 'replica A writes to Redis again');
  const prompt = 'After the storm, the sun came out again. ' + STORY;
  const tokens = await a.tokenize({ prompt });
  const before = metric(await a.metrics(), 'writes');
  const cold = await complete(a, prompt);
  await written(a, before + Math.floor(tokens.length / 16));
  const warm = await complete(b, prompt);
  assert.equal(warm.usage.prompt_tokens_details.cached_tokens, expectedCached(tokens.length, tokens.length),
    'B reads from Redis again');
  assert.equal(warm.choices[0].text, cold.choices[0].text);
});

test('a slow Redis costs a request at most its timeout', async (t) => {
  const redis = await startRedis();
  t.after(() => redis.cleanup());
  const [a, b] = await replicas(redis);
  const prompt = 'The slow store. ' + STORY;
  const cold = await complete(a, prompt);
  // Redis busy for 3 s (DEBUG SLEEP blocks it): B's lookup times out after 200 ms and computes.
  const sleeping = command(redis.port, 'DEBUG', 'SLEEP', '3').catch(() => {});
  await new Promise((r) => setTimeout(r, 100));
  const t0 = Date.now();
  const r = await complete(b, prompt);
  const ms = Date.now() - t0;
  assert.ok(ms < 2000, `answered in ${ms} ms while Redis slept`);
  assert.equal(r.choices[0].text, cold.choices[0].text);
  assert.ok(metric(await b.metrics(), 'errors') >= 1, 'the timeout is counted');
  await sleeping;
});

test("modules of a schema registered on replica A are found by replica B", async (t) => {
  const schema = fs.readFileSync(path.join(examples, 'story.xml'), 'utf8');
  const lily = fs.readFileSync(path.join(examples, 'lily.xml'), 'utf8');
  const redis = await startRedis();
  t.after(() => redis.cleanup());
  const [a, b] = await replicas(redis);
  assert.equal((await register(a, schema)).encoded_tokens, 593);
  const before = await complete(a, lily);
  await written(a, 593 / 16);
  // The schema is registered on each replica by its client; its modules come from Redis.
  const onB = await register(b, schema);
  assert.equal(onB.encoded_tokens, 0, 'nothing encoded again on B');
  assert.equal(onB.reused_tokens, 593);
  const r = await complete(b, lily);
  assert.equal(r.usage.prompt_tokens_details.cached_tokens, 236);
  assert.equal(r.timings.encoded_tokens, 0);
  assert.equal(r.choices[0].text, before.choices[0].text);
  assert.ok(metric(await b.metrics(), 'loads') > 0);
});

// A schema that changes one module of A's: B encodes that module only, as a replica that holds
// the other modules itself does, reading from Redis the modules it is computed after (loading a
// schema reads them there on the registering thread and loads them into RAM before the engine
// thread encodes: EngineImpl::EnsurePiece). Without those reads B encodes them too (main, with its
// engine-thread read switched off, encoded 69 tokens instead of 34).
test('a changed module registered on replica B is computed after modules read from Redis', async (t) => {
  const schema = fs.readFileSync(path.join(examples, 'story.xml'), 'utf8');
  const from = 'The sun was warm and the sky was blue.';
  assert.ok(schema.includes(from));
  const variant = schema.replace(from, 'The sun was hot and the sky was grey.');
  const redis = await startRedis();
  t.after(() => redis.cleanup());
  const [a, b] = await replicas(redis);
  const alone = await startServer([]);  // no Redis: the story's modules in its own RAM
  await register(a, schema);
  await written(a, 593 / 16);
  await register(alone, schema);
  const want = await register(alone, variant);
  assert.ok(want.encoded_tokens > 0 && want.encoded_tokens < 593, JSON.stringify(want));
  const onB = await register(b, variant);
  assert.equal(onB.encoded_tokens, want.encoded_tokens);
  assert.ok(metric(await b.metrics(), 'loads') > 0, 'B read modules from Redis');
});

// A router's view of a PML prompt (POST /v1/cache/lookup) counts in tiers.remote the modules that
// only Redis holds. B registers the story schema, which reads its modules from Redis into RAM at
// the schema's positions (the server's --positions); the same prompt at contiguous positions
// gathers the modules as the contiguous mode encodes them, under keys of their own, which A
// encoded for a request of its own and wrote to Redis, and which no registration on B reads. So
// B finds them in Redis alone, as many tokens as A finds in RAM. Mutations:
// EngineImpl::LookupPrompt without its remote branch, or with RemoteLeading compared with one
// block fewer than the piece has, leave B's remote count at 0.
test("a PML prompt's modules only Redis holds are counted in the lookup's remote tier", async (t) => {
  const schema = fs.readFileSync(path.join(examples, 'story.xml'), 'utf8');
  const lily = fs.readFileSync(path.join(examples, 'lily.xml'), 'utf8');
  const contiguous = lily.replace('<prompt schema="story">', '<prompt schema="story" positions="contiguous">');
  assert.notEqual(contiguous, lily);
  const redis = await startRedis();
  t.after(() => redis.cleanup());
  const [a, b] = await replicas(redis);
  const lookup = async (server, prompt) => {
    const r = await server.json('POST', '/v1/cache/lookup', { prompt });
    assert.equal(r.status, 200, r.text);
    assert.equal(r.body.modular, true);
    return r.body;
  };
  await register(a, schema);
  const cold = await complete(a, contiguous);  // encodes the contiguous mode's pieces
  const onA = await lookup(a, contiguous);
  assert.ok(onA.cached_tokens > 100, JSON.stringify(onA));
  assert.deepEqual(onA.tiers, { ram: onA.cached_tokens, disk: 0, remote: 0 });

  await register(b, schema);
  assert.deepEqual((await lookup(b, lily)).tiers, { ram: 236, disk: 0, remote: 0 },
    "the registration's modules are in B's RAM");
  // Once A's writer has sent the contiguous pieces' blocks, B finds them in Redis.
  await waitFor(async () => (await lookup(b, contiguous)).tiers.remote === onA.cached_tokens,
    { timeoutMs: 15000 });
  const view = await lookup(b, contiguous);
  assert.deepEqual(view.tiers, { ram: 0, disk: 0, remote: onA.cached_tokens });
  assert.equal(view.cached_tokens, onA.cached_tokens);
  assert.equal(view.prompt_tokens, onA.prompt_tokens);
  // A replica without Redis has the same modules nowhere.
  const alone = await startServer([]);
  await register(alone, schema);
  assert.deepEqual((await lookup(alone, contiguous)).tiers, { ram: 0, disk: 0, remote: 0 });
  // B's request then reuses what the lookup counted, read from Redis, and answers as A did.
  const loads = metric(await b.metrics(), 'loads');
  const warm = await complete(b, contiguous);
  assert.equal(warm.usage.prompt_tokens_details.cached_tokens, view.cached_tokens);
  assert.equal(warm.timings.encoded_tokens, 0);
  assert.ok(metric(await b.metrics(), 'loads') > loads, 'B read the modules from Redis');
  assert.equal(warm.choices[0].text, cold.choices[0].text);
});
