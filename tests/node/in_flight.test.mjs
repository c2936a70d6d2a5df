// Concurrent requests sharing a prefix compute it once (issue 34, engine/prefix_sharing.cc), seen
// from the real server and the official `openai` client: bursts of clients sending token-id
// prompts at once, with identical and overlapping cold prefixes. Counted from /metrics: the
// prompt tokens computed across a burst stay within the distinct tokens plus one block per
// request (without sharing they are every prompt's whole length), the responses' cached_tokens
// add up to the server's count, and the tokens taken from a sibling in flight are counted in
// promptcache_prefix_shared_in_flight_tokens_total. Every answer (greedy) equals the one a
// server without the prefix cache gives when the requests are sent one after the other.
//
// The model is synth's tiny-256 shape (stories260K's vocabulary), served with --batch-size 16 so
// that the first request's prefill of the shared prefix takes dozens of steps while the burst
// arrives. Exact bounds on the order of admission and on a request that shares nothing are
// checked in steps by src/engine/engine_in_flight_test.cc; nothing here is timed.
import { test, before } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { execFileSync } from 'node:child_process';
import { BIN, SHARED, BLOCK, startServer } from './server.mjs';

const CLIENTS = 8;
const QUESTION = 16;
const MAX_TOKENS = 8;

const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'promptcache-in-flight-'));
process.on('exit', () => fs.rmSync(dir, { recursive: true, force: true }));

// n token ids of a seeded run (different seeds share no block): plain tokens of stories260K's
// vocabulary (3..511: no BOS/EOS).
function ids(seed, n) {
  let x = (seed * 2654435761) >>> 0;
  const out = [];
  for (let i = 0; i < n; i++) {
    x = (Math.imul(x, 1664525) + 1013904223) >>> 0;
    out.push(3 + ((x >>> 8) % 509));
  }
  return out;
}

let server, reference, model;
before(async () => {
  const gguf = path.join(dir, 'tiny-256.gguf');
  execFileSync(BIN, ['synth', '--preset', 'tiny-256', '--vocab', path.join(SHARED, 'models', 'stories260K.gguf'),
    '--type', 'q8_0', '-o', gguf], { stdio: 'ignore' });
  [server, reference] = await Promise.all([
    startServer(['--parallel', String(CLIENTS), '--batch-size', '16'], { model: gguf }),
    startServer(['--no-prefix-cache', '--parallel', '1'], { model: gguf }),
  ]);
  model = (await server.client().models.list()).data[0].id;
});

const request = (prompt) => ({ model, prompt, max_tokens: MAX_TOKENS, temperature: 0, ignore_eos: true });

// The answers of `prompts` sent one after the other to the server without the prefix cache.
async function sequential(prompts) {
  const out = [];
  for (const p of prompts) out.push((await reference.client().completions.create(request(p))).choices[0].text);
  return out;
}

const COUNTERS = ['prompt_tokens', 'cached_tokens', 'computed_tokens', 'prefix_shared_in_flight_tokens'];
async function counters() {
  const m = await server.metrics();
  return Object.fromEntries(COUNTERS.map((c) => [c, m[`promptcache_${c}_total`]]));
}

// Sends `prompts` at once; checks each answer against the sequential one and returns the
// responses and what the burst added to the server's counters.
async function burst(prompts) {
  const expected = await sequential(prompts);
  const before = await counters();
  const client = server.client();
  const responses = await Promise.all(prompts.map((p) => client.completions.create(request(p))));
  const after = await counters();
  const delta = Object.fromEntries(COUNTERS.map((c) => [c, after[c] - before[c]]));
  responses.forEach((r, i) => {
    assert.equal(r.choices[0].text, expected[i], `request ${i}: the answer it gets alone`);
    assert.equal(r.usage.prompt_tokens, prompts[i].length);
    assert.equal(r.usage.completion_tokens, MAX_TOKENS);
  });
  const cached = responses.reduce((n, r) => n + r.usage.prompt_tokens_details.cached_tokens, 0);
  assert.equal(delta.prompt_tokens, prompts.reduce((n, p) => n + p.length, 0));
  assert.equal(delta.cached_tokens, cached, 'the responses\' cached_tokens are the server\'s');
  assert.equal(delta.computed_tokens, delta.prompt_tokens - cached);
  return { responses, delta };
}

// Mutations that fail here: a follower that never waits (AttachPrefix with may_wait false) computes
// the prefix again (computed ~8 x 656); shared_tokens left at 0 leaves the in-flight counter at 0.
test('8 clients at once with one cold 640-token prefix compute it once', async () => {
  const prefix = ids(1, 40 * BLOCK);
  const prompts = Array.from({ length: CLIENTS }, (_, i) => [...prefix, ...ids(100 + i, QUESTION)]);
  const { responses, delta } = await burst(prompts);
  // The prefix is whole blocks: the first request computes it and its question, the others
  // their questions only.
  assert.equal(delta.computed_tokens, prefix.length + CLIENTS * QUESTION);
  const followers = responses.filter((r) => r.usage.prompt_tokens_details.cached_tokens === prefix.length);
  assert.equal(followers.length, CLIENTS - 1);
  // They arrived while the first was computing it: at least some of it was shared in flight, and
  // what was is part of what they did not compute.
  assert.ok(delta.prefix_shared_in_flight_tokens >= BLOCK,
    `${delta.prefix_shared_in_flight_tokens} tokens shared in flight`);
  assert.ok(delta.prefix_shared_in_flight_tokens <= delta.cached_tokens);
  // Each response's timings say what it took in flight, and the counter is their sum; a wait
  // is part of prompt_ms, never more.
  const shared = responses.reduce((n, r) => n + (r.timings.shared_tokens ?? 0), 0);
  assert.equal(shared, delta.prefix_shared_in_flight_tokens);
  for (const r of responses) {
    if (r.timings.shared_tokens === undefined) continue;
    assert.ok(r.timings.wait_ms >= 0 && r.timings.wait_ms <= r.timings.prompt_ms, JSON.stringify(r.timings));
  }
});

// Half the clients share 330 tokens with the rest (not whole blocks), the other half 640: the
// distinct prompt tokens are 640 + 8 x 16; each request may also compute the block where it
// leaves the shared part. Mutation that fails here: a follower that never waits.
test('overlapping cold prefixes: each shared block is computed once', async () => {
  const long = ids(2, 40 * BLOCK);
  const prompts = Array.from({ length: CLIENTS }, (_, i) =>
    [...long.slice(0, i % 2 ? long.length : 330), ...ids(200 + i, QUESTION)]);
  const { delta } = await burst(prompts);
  const distinct = long.length + CLIENTS * QUESTION;
  assert.ok(delta.computed_tokens <= distinct + CLIENTS * BLOCK,
    `${delta.computed_tokens} prompt tokens computed for ${distinct} distinct ones`);
  assert.ok(delta.computed_tokens >= distinct, `${delta.computed_tokens} computed`);
  assert.ok(delta.prefix_shared_in_flight_tokens >= BLOCK);
});

// A warm burst (the prefix cached by the first test): nothing is in flight any more, so nothing is
// counted as shared in flight, and each request computes only its question.
test('a warm burst reuses the cache and shares nothing in flight', async () => {
  const prefix = ids(1, 40 * BLOCK);
  const prompts = Array.from({ length: CLIENTS }, (_, i) => [...prefix, ...ids(300 + i, QUESTION)]);
  const { delta } = await burst(prompts);
  assert.equal(delta.computed_tokens, CLIENTS * QUESTION);
  assert.equal(delta.prefix_shared_in_flight_tokens, 0);
});

// The first request (the leader) is cancelled, its client gone, while it computes a cold prefix
// that three others wait for: none of them fails, one takes over from the blocks the leader
// completed and the others follow it, and each answers as it would alone. So that the leader is
// still computing when the disconnect is noticed (at the next keep-alive write, a few hundred
// milliseconds), this server has SmolLM2-135M's shape (synth) and prefills one token a step: a
// step reads all its weights, ~110 MB. Mutation that fails here: the leader's claims not
// released when it is cancelled (Finish without claims_.ReleaseAll): the followers wait out their
// bound and then each compute the rest of the prefix.
test('a cancelled leader: a waiting request takes over, none fails', async () => {
  const gguf = path.join(dir, 'smollm2-135m.gguf');
  execFileSync(BIN, ['synth', '--preset', 'smollm2-135m', '--vocab', path.join(SHARED, 'models', 'stories260K.gguf'),
    '--type', 'q8_0', '-o', gguf], { stdio: 'ignore' });
  const n = 4;
  const [slow, ref] = await Promise.all([
    startServer(['--parallel', String(n), '--batch-size', '1'], { model: gguf }),
    startServer(['--no-prefix-cache', '--parallel', '1'], { model: gguf }),
  ]);
  const smol = (await slow.client().models.list()).data[0].id;
  const ask = (prompt) => ({ model: smol, prompt, max_tokens: MAX_TOKENS, temperature: 0, ignore_eos: true });
  const prefix = ids(3, 8 * BLOCK);
  const prompts = Array.from({ length: n }, (_, i) => [...prefix, ...ids(400 + i, QUESTION)]);
  const expected = [];
  for (const p of prompts.slice(1)) expected.push((await ref.client().completions.create(ask(p))).choices[0].text);
  await ref.stop();
  const metric = async (name) => (await slow.metrics())[`promptcache_${name}`];
  const until = async (name, value) => {
    for (let i = 0; i < 600 && (await metric(name)) !== value; i++) await new Promise((r) => setTimeout(r, 50));
    assert.equal(await metric(name), value, name);
  };

  const abort = new AbortController();
  const leader = fetch(`${slow.url}/v1/completions`, {
    method: 'POST', headers: { 'content-type': 'application/json' }, signal: abort.signal,
    body: JSON.stringify({ ...ask(prompts[0]), stream: true }),
  }).then((r) => r.text()).catch((e) => e.name);
  await until('requests_active', 1);  // admitted: its prefill has claimed the prefix
  const client = slow.client();
  const followers = Promise.all(prompts.slice(1).map((p) => client.completions.create(ask(p))));
  await until('requests_active', n);  // all admitted, waiting for the leader's blocks
  abort.abort();
  assert.equal(await leader, 'AbortError');
  const responses = await followers;
  responses.forEach((r, i) => assert.equal(r.choices[0].text, expected[i], `follower ${i}`));
  const m = await slow.metrics();
  assert.equal(m.promptcache_requests_cancelled_total, 1);
  assert.equal(m.promptcache_requests_failed_total, 0);
  // One follower computed what the leader had not (its cached_tokens end where the leader
  // stopped), the others took the whole prefix from it: the prefix is computed once.
  const cached = responses.map((r) => r.usage.prompt_tokens_details.cached_tokens).sort((a, b) => a - b);
  assert.ok(cached[0] < prefix.length, `the leader was cancelled before the end of the prefix: ${cached}`);
  assert.deepEqual(cached.slice(1), Array(n - 2).fill(prefix.length));
  const computed = responses.reduce((k, r) => k + r.usage.prompt_tokens - r.usage.prompt_tokens_details.cached_tokens, 0);
  assert.ok(computed <= prefix.length + (n - 1) * QUESTION, `${computed} computed by the followers`);
  assert.equal(m.promptcache_prefix_shared_in_flight_tokens_total, cached.reduce((a, b) => a + b, 0));
  await slow.stop();
});
