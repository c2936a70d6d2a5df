// Segments (docs/server.md "Segments", issue 33): a document reused at another position in a
// later prompt is served from the segment cache, through the official `openai` and
// `@anthropic-ai/sdk` clients, with the server flag (--segment-cache) or the request field
// ("cache_segments"); never across tenants; across replicas through a real redis-server;
// evaluated against the full recompute ("evaluate"); counted in /metrics and /v1/cache/lookup,
// also a tenant's found in Redis by another replica.
// The documents are examples/rag/stories (77 to 100 tokens each, written for stories260K).
//
// Mutations tried (each made these tests fail, then reverted): tokenizing a segment with what
// precedes it (Tokenizer::EncodeCut not cutting at a segment's start) fails (a) to (f); a
// segment's range starting one token early (the token before it, its context, in its key) fails
// (a) to (f); dropping the namespace from the segment key (engine/segment_store.cc) fails (c);
// an evaluate baseline with one prompt token changed fails (e) (KL > 0 at recompute 1); the
// lookup asking Redis for segment blocks under the tenant's namespace fails (g) only, and
// comparing its RemoteLeading with one block fewer fails (d) and (g).
import { test } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import Anthropic from '@anthropic-ai/sdk';
import { Ollama } from 'ollama';
import { startServer, MODEL, BLOCK, commonPrefix, expectedCached, waitFor } from './server.mjs';
import { startRedis } from './redis.mjs';

const here = path.dirname(fileURLToPath(import.meta.url));
const rag = path.join(here, '..', '..', 'examples', 'rag', 'stories');
const DOCS = fs.readFileSync(path.join(rag, 'docs.txt'), 'utf8').split(/\n---\n/).map((d) => d.trim());
const SYSTEM = fs.readFileSync(path.join(rag, 'system.txt'), 'utf8').trim();
const QUESTIONS = fs.readFileSync(path.join(rag, 'questions.txt'), 'utf8').split('\n').filter(Boolean);
const SEP = '\n\n---\n\n';
const FLAGS = ['--segment-min-tokens', '16'];

// OpenAI chat messages: the system text, then one user turn whose content parts are the
// documents and the question.
function chat(docs, question) {
  return [
    { role: 'system', content: SYSTEM },
    { role: 'user', content: [...docs.map((d) => ({ type: 'text', text: d })), { type: 'text', text: question }] },
  ];
}

// The same conversation with the parts joined as the server joins them, for /tokenize (which
// tokenizes without segments: the prefix cache's view).
function joined(messages) {
  return messages.map((m) => ({
    role: m.role,
    content: typeof m.content === 'string' ? m.content : m.content.map((p) => p.text).join('\n'),
  }));
}

async function create(server, messages, extra = {}, options = {}) {
  return server.client(options).chat.completions.create({
    model: MODEL, messages, max_tokens: 8, temperature: 0, ignore_eos: true, ...extra,
  });
}

const cached = (r) => r.usage.prompt_tokens_details.cached_tokens;

// What the prefix cache alone reuses of `second` after `first` (both plain conversations).
async function prefixFigure(server, first, second) {
  const t1 = await server.tokenize({ messages: joined(first), add_generation_prompt: true });
  const t2 = await server.tokenize({ messages: joined(second), add_generation_prompt: true });
  return { expected: expectedCached(commonPrefix(t1, t2), t2.length), length: t2.length };
}

const first = chat([DOCS[0], DOCS[1]], QUESTIONS[0]);
const second = chat([DOCS[2], DOCS[0]], QUESTIONS[1]);

test('(a) a document reused at another position hits only with segments on', async () => {
  const on = await startServer(['--segment-cache', ...FLAGS]);
  const off = await startServer(FLAGS);
  const { expected } = await prefixFigure(on, first, second);
  assert.ok(expected < 100, `the common prefix is the system text only (${expected} tokens)`);

  // Server flag: document A (about 90 tokens) is found after document C.
  await create(on, first);
  const hit = await create(on, second);
  assert.ok(hit.timings.segment_lookups >= 2, JSON.stringify(hit.timings));
  assert.ok(hit.timings.segment_hits >= 1, JSON.stringify(hit.timings));
  assert.ok(cached(hit) >= expected + 40, `cached ${cached(hit)} > prefix ${expected}`);
  const prefixHit = cached(hit) - hit.timings.segment_tokens_reused;
  assert.ok(hit.timings.segment_tokens_reused >= 40 && prefixHit % BLOCK === 0,
    'what the segments add is the tokens reused beyond a prefix hit of whole blocks');
  // "cache_segments": false on the same server: the prefix cache's figure exactly. (Cut and
  // uncut tokenizations differ at a segment's ends, so the plain requests share their prefix
  // with each other, not with the cut ones above.)
  const p1 = chat([DOCS[3], DOCS[1]], QUESTIONS[2]);
  const p2 = chat([DOCS[4], DOCS[3]], QUESTIONS[3]);
  await create(on, p1, { cache_segments: false });
  const plain = await create(on, p2, { cache_segments: false });
  assert.equal(cached(plain), (await prefixFigure(on, p1, p2)).expected);
  assert.equal(plain.timings.segment_lookups, undefined);

  // Segments off: exactly the prefix cache's figure.
  await create(off, first);
  assert.equal(cached(await create(off, second)), expected);
  // The request field on a server started without the flag: document B, computed above without
  // segments (so not stored), is stored by a request with segments and found by the next.
  await create(off, chat([DOCS[4], DOCS[1]], QUESTIONS[3]), { cache_segments: true });
  const asked = await create(off, chat([DOCS[5], DOCS[1]], QUESTIONS[4]), { cache_segments: true });
  const q = await prefixFigure(off, chat([DOCS[4], DOCS[1]], QUESTIONS[3]), chat([DOCS[5], DOCS[1]], QUESTIONS[4]));
  assert.ok(asked.timings.segment_hits >= 1);
  assert.ok(cached(asked) >= q.expected + 40, `cached ${cached(asked)} > prefix ${q.expected}`);

  // A completion prompt is cut at --segment-separator; the Responses API's input parts too.
  const sep = await startServer(['--segment-cache', '--segment-separator', '\\n\\n---\\n\\n', ...FLAGS]);
  const prompt = (docs, question) => [SYSTEM, ...docs, question].join(SEP);
  const c = sep.client();
  const args = { model: MODEL, max_tokens: 8, temperature: 0, ignore_eos: true };
  await c.completions.create({ ...args, prompt: prompt([DOCS[6], DOCS[7]], QUESTIONS[5]) });
  const cr = await c.completions.create({ ...args, prompt: prompt([DOCS[8], DOCS[7]], QUESTIONS[6]) });
  assert.ok(cr.timings.segment_hits >= 1, JSON.stringify(cr.timings));
  assert.ok(cr.usage.prompt_tokens_details.cached_tokens > 100);
  const input = (docs, question) => [
    { role: 'system', content: SYSTEM },
    { role: 'user', content: [...docs, question].map((text) => ({ type: 'input_text', text })) },
  ];
  await c.responses.create({ model: MODEL, input: input([DOCS[9], DOCS[10]], QUESTIONS[7]), max_output_tokens: 8 });
  const rr = await c.responses.create({ model: MODEL, input: input([DOCS[11], DOCS[9]], QUESTIONS[0]), max_output_tokens: 8 });
  assert.ok(rr.usage.input_tokens_details.cached_tokens >= 100, JSON.stringify(rr.usage));
});

test('(b) Anthropic content blocks are segments (cache_read_input_tokens)', async () => {
  const on = await startServer(['--segment-cache', ...FLAGS]);
  const anthropic = new Anthropic({ baseURL: on.url, apiKey: 'unused', maxRetries: 0, timeout: 60000 });
  const blocks = (docs, question) => ({
    system: [{ type: 'text', text: SYSTEM }],
    messages: [{ role: 'user', content: [...docs, question].map((text) => ({ type: 'text', text })) }],
  });
  const ask = (docs, question, extra = {}) => anthropic.messages.create({
    model: MODEL, max_tokens: 8, temperature: 0, ...blocks(docs, question), ...extra,
  });
  // The prefix cache's figure, from the same conversation with the blocks joined (Anthropic
  // joins them without a separator).
  const plain = (docs, question) => [
    { role: 'system', content: SYSTEM }, { role: 'user', content: [...docs, question].join('') },
  ];
  const t1 = await on.tokenize({ messages: plain([DOCS[0], DOCS[1]], QUESTIONS[0]), add_generation_prompt: true });
  const t2 = await on.tokenize({ messages: plain([DOCS[2], DOCS[0]], QUESTIONS[1]), add_generation_prompt: true });
  const expected = expectedCached(commonPrefix(t1, t2), t2.length);

  await ask([DOCS[0], DOCS[1]], QUESTIONS[0]);
  const hit = await ask([DOCS[2], DOCS[0]], QUESTIONS[1]);
  assert.ok(hit.usage.cache_read_input_tokens >= expected + 40,
    `cache_read_input_tokens ${hit.usage.cache_read_input_tokens} > prefix ${expected}`);
  // Off for one request: the prefix only.
  await ask([DOCS[3], DOCS[4]], QUESTIONS[2], { cache_segments: false });
  const off = await ask([DOCS[5], DOCS[3]], QUESTIONS[3], { cache_segments: false });
  const t3 = await on.tokenize({ messages: plain([DOCS[3], DOCS[4]], QUESTIONS[2]), add_generation_prompt: true });
  const t4 = await on.tokenize({ messages: plain([DOCS[5], DOCS[3]], QUESTIONS[3]), add_generation_prompt: true });
  assert.equal(off.usage.cache_read_input_tokens, expectedCached(commonPrefix(t3, t4), t4.length));
  // A bad value is Anthropic's 400 naming the field.
  await assert.rejects(ask([DOCS[0]], QUESTIONS[0], { cache_segments: 'yes' }),
    (e) => e.status === 400 && /cache_segments/.test(e.message));
  await assert.rejects(ask([DOCS[0]], QUESTIONS[0], { cache_segments: false, recompute: 0.5 }),
    (e) => e.status === 400 && /recompute/.test(e.message));
});

test('(c) tenants never share segments', async (t) => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'promptcache-segments-'));
  t.after(() => fs.rmSync(dir, { recursive: true, force: true }));
  const keys = path.join(dir, 'keys');
  fs.writeFileSync(keys, 'key-alice alice\nkey-bob bob\n');
  const server = await startServer(['--segment-cache', '--api-keys', keys, ...FLAGS]);
  await create(server, first, {}, { apiKey: 'key-alice' });
  const bob = await create(server, second, {}, { apiKey: 'key-bob' });
  assert.equal(bob.timings.segment_hits, 0, "bob does not find alice's document");
  assert.equal(cached(bob), 0);
  // The control: alice's own second request finds it.
  const alice = await create(server, second, {}, { apiKey: 'key-alice' });
  assert.ok(alice.timings.segment_hits >= 1);
});

test('(d) a second replica reuses through Redis a segment the first computed', async (t) => {
  const redis = await startRedis();
  t.after(() => redis.cleanup());
  const args = ['--segment-cache', '--cache-redis', redis.url, '--cache-redis-timeout', '200', ...FLAGS];
  const [a, b] = await Promise.all([startServer(args), startServer(args)]);
  const { expected } = await prefixFigure(a, first, second);
  await create(a, first);
  // A router's view on B: the segment is in some tier once A's writer has sent it.
  const lookup = () => b.json('POST', '/v1/cache/lookup', { messages: second, add_generation_prompt: true });
  assert.ok(await waitFor(async () => (await lookup()).body.segment_tokens > 0, { timeoutMs: 15000 }),
    'B sees the segment in Redis');
  const hit = await create(b, second);
  assert.ok(hit.timings.segment_hits >= 1, JSON.stringify(hit.timings));
  assert.ok(cached(hit) >= expected + 40, `cached ${cached(hit)} > prefix ${expected}`);
});

test('(e) evaluate reports fidelity for a request with segments', async () => {
  const server = await startServer(['--segment-cache', ...FLAGS]);
  await create(server, first);
  const evaluated = await create(server, second, { evaluate: true, recompute: 0 });
  assert.ok(evaluated.timings.segment_hits >= 1);
  const f = evaluated.fidelity.contiguous;
  assert.equal(f.steps, 8);
  for (const k of ['top1_agreement', 'margin_top1_agreement']) {
    assert.ok(f[k] >= 0 && f[k] <= 1, `${k} ${f[k]}`);
  }
  assert.ok(f.margin_steps >= 0 && f.margin_steps <= f.steps);
  assert.ok(f.first_token_kl >= 0);
  assert.equal(typeof f.greedy_equal, 'boolean');
  assert.equal(evaluated.fidelity.gapped, undefined, 'segments have the contiguous baseline only');
  // Recompute everything: the run is the plain prompt's, so it must score exactly.
  const exact = await create(server, chat([DOCS[3], DOCS[0]], QUESTIONS[2]), { evaluate: true, recompute: 1 });
  assert.ok(exact.timings.segment_hits >= 1);
  assert.equal(exact.fidelity.contiguous.top1_agreement, 1);
  assert.ok(exact.fidelity.contiguous.first_token_kl < 1e-6, `KL ${exact.fidelity.contiguous.first_token_kl}`);
  assert.equal(exact.fidelity.contiguous.greedy_equal, true);
  // A plain prompt without segments: evaluate and recompute stay refused, naming the field.
  for (const extra of [{ evaluate: true }, { recompute: 0.2 }]) {
    await assert.rejects(create(server, first, { cache_segments: false, ...extra }),
      (e) => e.status === 400 && e.param === Object.keys(extra)[0]);
  }
  await assert.rejects(create(server, first, { cache_segments: 1 }),
    (e) => e.status === 400 && e.param === 'cache_segments');
  await assert.rejects(create(server, first, { evaluate: true, stream: true }), (e) => e.status === 400);
});

test('(f) /metrics and /v1/cache/lookup count segments', async () => {
  const server = await startServer(['--segment-cache', ...FLAGS]);
  const names = ['lookups', 'hits', 'tokens_reused', 'stores'].map((n) => `promptcache_segment_${n}_total`);
  const before = await server.metrics();
  for (const n of names) assert.equal(before[n], 0, n);
  const lookup = (extra = {}) => server.json('POST', '/v1/cache/lookup',
    { messages: second, add_generation_prompt: true, ...extra });
  await create(server, first);
  const l = await lookup();
  assert.equal(l.status, 200, l.text);
  assert.ok(l.body.segment_tokens >= 64, `segment_tokens ${l.body.segment_tokens}`);
  assert.equal((await lookup({ cache_segments: false })).body.segment_tokens, 0);
  assert.equal((await lookup({ cache_segments: 'no' })).status, 400);
  const hit = await create(server, second);
  const after = await server.metrics();
  assert.ok(after[names[0]] >= 4, `lookups ${after[names[0]]}`);
  assert.equal(after[names[1]], hit.timings.segment_hits);
  assert.equal(after[names[2]], hit.timings.segment_tokens_reused);
  assert.ok(after[names[3]] >= 3, `stores ${after[names[3]]}`);
});

// What a router asks B of a tenant's prompt: segments stored by A (so only Redis holds them, under
// names in the default namespace, their keys carrying the tenant's) are counted in that tenant's
// namespace, as many as A counts in RAM, and in no other tenant's. The default namespace (the
// admin key) is the control. Mutation: LookupCache asking the remote tier for the segment blocks
// under the tenant's namespace instead of the default one (EngineImpl::LookupCache) leaves
// alice's count at 0 on B while the default namespace's stays right.
test("(g) a tenant's segments only Redis holds are counted in its namespace on another replica", async (t) => {
  const redis = await startRedis();
  t.after(() => redis.cleanup());
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'promptcache-segments-'));
  t.after(() => fs.rmSync(dir, { recursive: true, force: true }));
  const keys = path.join(dir, 'keys');
  fs.writeFileSync(keys, 'key-alice alice\nkey-bob bob\n');
  const args = ['--segment-cache', '--cache-redis', redis.url, '--cache-redis-timeout', '200',
    '--api-keys', keys, '--api-key', 'admin-key', '--cache-secret', 'a-secret-both-replicas-share', ...FLAGS];
  const [a, b] = await Promise.all([startServer(args), startServer(args)]);
  const lookup = async (server, key) => {
    const r = await server.json('POST', '/v1/cache/lookup', { messages: second, add_generation_prompt: true },
      { authorization: `Bearer ${key}` });
    assert.equal(r.status, 200, r.text);
    return r.body;
  };
  for (const key of ['key-alice', 'admin-key']) await create(a, first, {}, { apiKey: key });
  const onA = await lookup(a, 'key-alice');
  assert.ok(onA.segment_tokens >= 40, `alice's document found on A (${onA.segment_tokens} tokens)`);
  assert.equal((await lookup(a, 'admin-key')).segment_tokens, onA.segment_tokens);
  assert.equal((await lookup(a, 'key-bob')).segment_tokens, 0);

  // On B, once A's writer has sent the blocks: the same figures, from Redis alone.
  const same = (v) => v.segment_tokens === onA.segment_tokens && v.cached_tokens === onA.cached_tokens;
  for (const key of ['admin-key', 'key-alice']) {
    await waitFor(async () => same(await lookup(b, key)), { timeoutMs: 15000 });
    const view = await lookup(b, key);
    assert.deepEqual(view.tiers, { ram: 0, disk: 0, remote: onA.tiers.ram }, key);
    assert.equal(view.segment_tokens, onA.segment_tokens, `${key}: the segment A stored, read in Redis by B`);
    assert.equal(view.cached_tokens, onA.cached_tokens, key);
  }
  const bob = await lookup(b, 'key-bob');
  assert.equal(bob.segment_tokens, 0, "bob does not see alice's segment in Redis");
  assert.equal(bob.cached_tokens, 0);
  // Alice's request on B then reuses what the lookup counted (less the tokens it recomputes).
  const hit = await create(b, second, {}, { apiKey: 'key-alice' });
  const { segment_tokens_reused: reused, recomputed_tokens: recomputed } = hit.timings;
  assert.equal(reused + recomputed, onA.segment_tokens, JSON.stringify(hit.timings));
  assert.equal(cached(hit), onA.cached_tokens - recomputed);
});

// Ollama's dialect (Open WebUI's RAG sends its documents through /api/chat): each message is a
// segment, as on the other routes; the server flag turns it on, the request field
// ("cache_segments", an extension as on the chat route) off. Mutation: Ollama's routes building
// their own prompt without segments (as before) fails it.
test('(h) Ollama\'s /api/chat and /api/generate reuse segments', async () => {
  const server = await startServer(['--segment-cache', '--segment-separator', SEP, ...FLAGS]);
  const ollama = new Ollama({ host: server.url });
  const messages = (docs, question) => [
    { role: 'system', content: SYSTEM },
    ...docs.map((d) => ({ role: 'user', content: d })),
    { role: 'user', content: question },
  ];
  const hits = async () => (await server.metrics()).promptcache_segment_hits_total;
  const options = { temperature: 0, num_predict: 4 };
  await ollama.chat({ model: MODEL, messages: messages([DOCS[0], DOCS[1]], QUESTIONS[0]), options });
  assert.equal(await hits(), 0);
  const again = messages([DOCS[2], DOCS[0]], QUESTIONS[1]);
  await ollama.chat({ model: MODEL, messages: again, options, cache_segments: false });
  assert.equal(await hits(), 0, 'cache_segments false: no lookup');
  const r = await ollama.chat({ model: MODEL, messages: again, options });
  assert.equal(r.done_reason, 'length');
  const after = await hits();
  assert.ok(after >= 1, `document 0 found after document 2 (${after} hits)`);
  // /api/generate's prompt is cut at the separator.
  await ollama.generate({ model: MODEL, prompt: [DOCS[3], DOCS[0]].join(SEP), options });
  assert.ok(await hits() > after, 'the generate prompt reused document 0');
  await assert.rejects(ollama.chat({ model: MODEL, messages: again, options, cache_segments: 'yes' }),
    (e) => e.status_code === 400 && /cache_segments/.test(e.message));
});

test('bad segment flags are a one-line error', async () => {
  for (const args of [['--segment-encoding', 'sideways'], ['--segment-min-tokens', '0'],
    ['--segment-border', '-1'], ['--segment-separator', 'a\\qb']]) {
    await assert.rejects(startServer(args, { timeoutMs: 10000 }), (e) => /error: --segment/.test(e.message), args.join(' '));
  }
});
