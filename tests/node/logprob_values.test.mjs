// Log-probabilities as values, through the official OpenAI client: every logprob and top
// alternative the server reports (chat, completions with echo, n > 1, prompts whose prefix comes
// from the cache) equals a log-softmax written here over the logits that `promptcache logits`
// writes for the same token ids in another process (one batch, no server, no cache), to 1e-4.
// Greedy decoding makes the generated ids known: each is the argmax of the previous row.
// Mutation caught: 0.05 nats added to the log-sum-exp in src/serving/logprobs.cc.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { startServer, MODEL, MODEL_PATH, BIN, STORY } from './server.mjs';

const TOLERANCE = 1e-4;
let server, client, dir, files = 0;
before(async () => {
  server = await startServer(['--parallel', '2']);
  client = server.client();
  dir = fs.mkdtempSync(path.join(os.tmpdir(), 'promptcache-logprobs-'));
});
after(() => fs.rmSync(dir, { recursive: true, force: true }));

// Rows of logits, one per token of `ids`, from `promptcache logits` (K/V in f16 as the server's).
function cliLogits(ids, kvType = 'f16') {
  const file = path.join(dir, `logits-${files++}.bin`);
  execFileSync(BIN, ['logits', '-m', MODEL_PATH, '-t', '1', '--kv-type', kvType, '-o', file, ...ids.map(String)],
    { stdio: ['ignore', 'ignore', 'pipe'] });
  const bytes = fs.readFileSync(file);
  const all = new Float32Array(bytes.buffer, bytes.byteOffset, bytes.length / 4);
  const vocab = all.length / ids.length;
  assert.equal(vocab, 512);  // stories260K
  return ids.map((_, i) => all.subarray(i * vocab, (i + 1) * vocab));
}

function logSoftmax(row) {
  let max = -Infinity;
  for (const x of row) max = Math.max(max, x);
  let sum = 0;
  for (const x of row) sum += Math.exp(x - max);
  const lse = max + Math.log(sum);
  return Array.from(row, (x) => x - lse);
}

const argmax = (row) => row.reduce((best, x, i) => (x > row[best] ? i : best), 0);

// The greedy continuation of `prompt` (n ids) and the log-softmax of each row that predicted a
// token: rows[i] predicts all[i + 1] of all = prompt + generated.
function reference(prompt, n) {
  const generated = [];
  let rows = cliLogits(prompt);
  while (generated.length < n) {
    generated.push(argmax(rows[rows.length - 1]));
    if (generated.length < n) rows = cliLogits([...prompt, ...generated]);
  }
  return { generated, lsm: rows.map(logSoftmax) };
}

const near = (got, want, what) =>
  assert.ok(Math.abs(got - want) <= TOLERANCE, `${what}: ${got} against ${want}`);

// The k best values of a log-softmax row, best first.
const topValues = (lsm, k) => [...lsm].sort((a, b) => b - a).slice(0, k);

function checkTop(gotValues, lsm, what) {
  const want = topValues(lsm, gotValues.length);
  gotValues.forEach((v, k) => near(v, want[k], `${what}, alternative ${k}`));
}

// A chat's generated tokens, greedy: values and alternatives.
async function checkChat(messages, { expectCached = false } = {}) {
  const prompt = await server.tokenize({ messages, add_generation_prompt: true });
  const r = await client.chat.completions.create({
    model: MODEL, messages, max_tokens: 8, temperature: 0, ignore_eos: true, logprobs: true, top_logprobs: 4,
  });
  if (expectCached) assert.ok(r.usage.prompt_tokens_details.cached_tokens > 0, 'a prefix hit');
  const { generated, lsm } = reference(prompt, 8);
  const content = r.choices[0].logprobs.content;
  assert.equal(content.length, 8);
  content.forEach((e, i) => {
    const row = lsm[prompt.length - 1 + i];
    near(e.logprob, row[generated[i]], `chat token ${i}`);
    checkTop(e.top_logprobs.map((t) => t.logprob), row, `chat token ${i}`);
  });
}

test('chat: generated tokens, computed and with the prefix from the cache', async () => {
  const system = { role: 'system', content: STORY.slice(0, 400) };
  await checkChat([system, { role: 'user', content: 'Tell me about the dog.' }]);
  await checkChat([system, { role: 'user', content: 'What did Lily eat?' }], { expectCached: true });
});

// Completions with echo: the prompt's tokens (from the second on) and the generated ones.
async function checkEcho(prompt, { expectCached = false } = {}) {
  const ids = await server.tokenize({ prompt });
  const r = await client.completions.create({
    model: MODEL, prompt, max_tokens: 3, echo: true, logprobs: 2, temperature: 0, ignore_eos: true,
  });
  const cached = r.usage.prompt_tokens_details.cached_tokens;
  if (expectCached) assert.ok(cached >= 16 * Math.floor((ids.length - 20) / 16), `cached ${cached}`);
  else assert.equal(cached, 0);
  const { generated, lsm } = reference(ids, 3);
  const all = [...ids, ...generated];
  const lp = r.choices[0].logprobs;
  assert.equal(lp.token_logprobs.length, all.length);
  assert.equal(lp.token_logprobs[0], null);
  for (let i = 1; i < all.length; i++) {
    near(lp.token_logprobs[i], lsm[i - 1][all[i]], `token ${i}`);
    checkTop(Object.values(lp.top_logprobs[i]).sort((a, b) => b - a), lsm[i - 1], `token ${i}`);
  }
}

test('completions echo: prompt and generated tokens, computed and from the cache', async () => {
  const context = STORY.slice(0, 500);
  await checkEcho(context + ' The dog was happy.');
  await checkEcho(context + ' The cat ran away.', { expectCached: true });
  await checkEcho(context + ' The cat ran away.', { expectCached: true });  // the whole prompt
});

test('n > 1: every greedy choice, forked from one prefill', async () => {
  const prompt = 'Once upon a time';
  const ids = await server.tokenize({ prompt });
  const r = await client.completions.create({
    model: MODEL, prompt, max_tokens: 6, n: 3, logprobs: 3, temperature: 0, ignore_eos: true,
  });
  assert.equal(r.choices.length, 3);
  const { generated, lsm } = reference(ids, 6);
  // The reference itself against the model's README (computed with f32 K/V): at the prompt's
  // last position the top two logits are 17.79940 and 14.28126 (ids 432 ',' and 383 ' there').
  assert.equal(generated[0], 432);
  const f32 = cliLogits(ids, 'f32')[ids.length - 1];
  near(f32[432], 17.79940, 'README'); near(f32[383], 14.28126, 'README');
  for (const c of r.choices) {
    assert.equal(c.logprobs.token_logprobs.length, 6);
    c.logprobs.token_logprobs.forEach((v, i) => {
      const row = lsm[ids.length - 1 + i];
      near(v, row[generated[i]], `choice ${c.index} token ${i}`);
      checkTop(Object.values(c.logprobs.top_logprobs[i]).sort((a, b) => b - a), row,
        `choice ${c.index} token ${i}`);
    });
  }
});
