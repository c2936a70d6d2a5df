// POST /v1/embeddings with the real `openai` client (client.embeddings.create, which asks for
// base64 unless told otherwise) and POST /api/embed with the real `ollama` client
// (ollama.embed): shapes, usage, L2 normalization, a batch equal to its inputs one by one, token
// ids equal to their text, the refusals (dimensions, unknown model, bad input), and the vectors
// against two references: `promptcache embed` (the CLI, the same engine: bit for bit) and
// llama.cpp's own llama-embedding (src/engine/testdata/embeddings, F32 K/V: within 2e-6, the
// bound embedding_test measured and justifies).
// Mutations tried, each failing here: base64 written big-endian (the client's decoded vectors,
// test 1), the route not normalizing (tests 1, 3, 4, 5), the empty-string check removed (test 2),
// Ollama's truncate ignored (test 5), Ollama's error flavour written in OpenAI's shape (test 5).
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { Ollama } from 'ollama';
import OpenAI from 'openai';
import { startServer, BIN, MODEL, MODEL_PATH } from './server.mjs';

const PROMPTS = ['Once upon a time', 'Lily saw a big red ball in the park. She wanted to play with it, but it was too high.', 'Hi'];

// llama-embedding's stdout kept in testdata (its README): each input's token ids, then JSON.
function llamaCpp(name) {
  const text = readFileSync(new URL(`../../src/engine/testdata/embeddings/${name}.txt`, import.meta.url), 'utf8');
  const tokens = [];
  let current = [];
  const lines = text.split('\n');
  let i = 0;
  for (; i < lines.length && !lines[i].startsWith('{'); ++i) {
    const m = lines[i].match(/^\s*(\d+) -> '/);
    if (m) current.push(Number(m[1]));
    else if (lines[i] === '' && current.length) {
      tokens.push(current);
      current = [];
    }
  }
  return { tokens, vectors: JSON.parse(lines.slice(i).join('\n')).data.map((d) => d.embedding) };
}

// The same float32 (JSON text and base64 both carry float32 values).
function sameFloats(a, b, what) {
  assert.equal(a.length, b.length, what);
  for (let i = 0; i < a.length; ++i) assert.equal(Math.fround(a[i]), Math.fround(b[i]), `${what}[${i}]`);
}

function maxDiff(a, b) {
  assert.equal(a.length, b.length);
  return Math.max(...a.map((x, i) => Math.abs(x - b[i])));
}

const norm = (v) => Math.sqrt(v.reduce((s, x) => s + x * x, 0));

test('openai client: shapes, usage, normalization, batch = singles, float = base64, ids = text', async () => {
  const s = await startServer();
  const client = s.client();
  const batch = await client.embeddings.create({ model: MODEL, input: PROMPTS });
  assert.equal(batch.object, 'list');
  assert.equal(batch.model, MODEL);
  assert.equal(batch.data.length, PROMPTS.length);
  const ids = [];
  for (const [i, d] of batch.data.entries()) {
    assert.equal(d.object, 'embedding');
    assert.equal(d.index, i);
    assert.equal(d.embedding.length, 64);
    assert.ok(Math.abs(norm(d.embedding) - 1) < 1e-5, `|v| = ${norm(d.embedding)}`);
    // Each input is its tokens (BOS first, no EOS for this model) as /tokenize gives them.
    ids.push(await s.tokenize({ prompt: PROMPTS[i] }));
  }
  const tokens = ids.reduce((n, t) => n + t.length, 0);
  assert.deepEqual(batch.usage, { prompt_tokens: tokens, total_tokens: tokens });

  for (const [i, p] of PROMPTS.entries()) {
    const single = await client.embeddings.create({ model: MODEL, input: p, encoding_format: 'float' });
    assert.equal(single.data.length, 1);
    assert.equal(single.usage.prompt_tokens, ids[i].length);
    sameFloats(single.data[0].embedding, batch.data[i].embedding, `single ${i}`);
  }
  // Token ids, one input and several, are the texts' embeddings.
  const one = await client.embeddings.create({ model: MODEL, input: ids[0] });
  sameFloats(one.data[0].embedding, batch.data[0].embedding, 'ids');
  const many = await client.embeddings.create({ model: MODEL, input: ids });
  for (let i = 0; i < ids.length; ++i) sameFloats(many.data[i].embedding, batch.data[i].embedding, `ids ${i}`);
  // The raw base64 is what the client decoded.
  const raw = await s.json('POST', '/v1/embeddings', { input: PROMPTS[2], encoding_format: 'base64' });
  assert.equal(raw.status, 200);
  assert.equal(raw.body.model, MODEL, 'no model given: the served one');
  const buf = Buffer.from(raw.body.data[0].embedding, 'base64');
  sameFloats(Array.from(new Float32Array(buf.buffer, buf.byteOffset, buf.length / 4)), batch.data[2].embedding, 'base64');
});

test('openai client: dimensions, unknown model and bad input are 4xx naming the field', async () => {
  const s = await startServer();
  const client = s.client();
  const full = await client.embeddings.create({ model: MODEL, input: 'Hi', dimensions: 64 });
  assert.equal(full.data[0].embedding.length, 64);
  await assert.rejects(client.embeddings.create({ model: MODEL, input: 'Hi', dimensions: 32 }), (e) => {
    assert.equal(e.status, 400);
    assert.equal(e.param, 'dimensions');
    assert.match(e.message, /dimensions 32 is not supported: this model's embeddings have 64/);
    return true;
  });
  await assert.rejects(client.embeddings.create({ model: 'text-embedding-3-small', input: 'Hi' }), (e) => {
    assert.equal(e.status, 404);
    assert.equal(e.code, 'model_not_found');
    return true;
  });
  for (const [body, param] of [
    [{ input: '' }, 'input'],
    [{ input: [] }, 'input'],
    [{ input: [[1, 2], []] }, 'input[1]'],
    [{ input: [1, 100000] }, 'input'],
    [{ input: 'Hi', encoding_format: 'int8' }, 'encoding_format'],
    [{ input: 'Hi', pooling: 'last' }, 'pooling'],
  ]) {
    const r = await s.json('POST', '/v1/embeddings', body);
    assert.equal(r.status, 400, JSON.stringify(body));
    assert.equal(r.body.error.param, param, JSON.stringify(body));
  }
  // Over the context: refused with both numbers.
  const c = await startServer(['-c', '16']);
  const long = await c.json('POST', '/v1/embeddings', { input: PROMPTS[1] });
  assert.equal(long.status, 400);
  assert.match(long.body.error.message, /the input has \d+ tokens; the context size is 16/);
});

test('the CLI (promptcache embed) gives the server\'s vectors bit for bit, for each pooling', async () => {
  for (const pooling of ['mean', 'last', 'cls']) {
    const s = await startServer(['--pooling', pooling]);
    const served = await s.client().embeddings.create({ model: MODEL, input: PROMPTS });
    const args = ['embed', '-m', MODEL_PATH, '-t', '1', '--pooling', pooling, ...PROMPTS.flatMap((p) => ['-p', p])];
    const cli = JSON.parse(execFileSync(BIN, args, { encoding: 'utf8' }));
    assert.equal(cli.pooling, pooling);
    assert.deepEqual(cli.usage, served.usage);
    for (let i = 0; i < PROMPTS.length; ++i) sameFloats(served.data[i].embedding, cli.data[i].embedding, `${pooling} ${i}`);
    await s.stop();
  }
});

test('the server\'s vectors are llama.cpp\'s (llama-embedding, F32 K/V) for mean and last pooling', async () => {
  for (const pooling of ['mean', 'last']) {
    const ref = llamaCpp(`${pooling}-l2`);
    const s = await startServer(['--kv-type', 'f32', '--pooling', pooling]);
    // The reference's own token ids, so that this compares the vectors only.
    const served = await s.client().embeddings.create({ model: MODEL, input: ref.tokens, encoding_format: 'float' });
    for (let i = 0; i < ref.tokens.length; ++i) {
      const d = maxDiff(served.data[i].embedding, ref.vectors[i]);
      assert.ok(d < 2e-6, `${pooling} input ${i}: max difference ${d}`);
    }
    await s.stop();
  }
});

test('ollama client: embed gives the OpenAI route\'s vectors, counts, durations; errors', async () => {
  const s = await startServer(['-c', '24']);
  const ollama = new Ollama({ host: s.url });
  const res = await ollama.embed({ model: MODEL, input: PROMPTS });
  assert.equal(res.model, MODEL);
  assert.equal(res.embeddings.length, PROMPTS.length);
  assert.equal(res.load_duration, 0);
  assert.ok(Number.isInteger(res.total_duration) && res.total_duration > 0);
  // PROMPTS[1] is over the 24-token context: Ollama's default truncate keeps its first 24.
  const ids = [];
  for (const p of PROMPTS) ids.push((await s.tokenize({ prompt: p })).slice(0, 24));
  assert.ok((await s.tokenize({ prompt: PROMPTS[1] })).length > 24);
  assert.equal(res.prompt_eval_count, ids.reduce((n, t) => n + t.length, 0));
  const openai = await s.client().embeddings.create({ model: MODEL, input: ids });
  for (let i = 0; i < PROMPTS.length; ++i) sameFloats(res.embeddings[i], openai.data[i].embedding, `ollama ${i}`);
  const single = await ollama.embed({ model: MODEL, input: PROMPTS[2] });
  sameFloats(single.embeddings[0], res.embeddings[2], 'ollama single');
  assert.ok(Math.abs(norm(single.embeddings[0]) - 1) < 1e-5);

  await assert.rejects(ollama.embed({ model: MODEL, input: PROMPTS[1], truncate: false }), (e) => {
    assert.equal(e.status_code, 400);
    assert.match(e.error, /the input has \d+ tokens; the context size is 24/);
    return true;
  });
  await assert.rejects(ollama.embed({ model: 'nomic-embed-text', input: 'Hi' }), (e) => {
    assert.equal(e.status_code, 404);
    assert.match(e.error, /'nomic-embed-text' does not exist/);
    return true;
  });
  await assert.rejects(ollama.embed({ model: MODEL, input: [] }), (e) => e.status_code === 400);

  // Refusals before the route runs (here a missing key) are Ollama's shape on /api/embed too.
  const keyed = await startServer(['--api-key', 'k']);
  await assert.rejects(new Ollama({ host: keyed.url }).embed({ model: MODEL, input: 'Hi' }), (e) => {
    assert.equal(e.status_code, 401);
    assert.equal(typeof e.error, 'string');
    return true;
  });
  const withKey = new Ollama({ host: keyed.url, headers: { authorization: 'Bearer k' } });
  assert.equal((await withKey.embed({ model: MODEL, input: 'Hi' })).embeddings.length, 1);
});

test('serve --pooling refuses none and unknown names', async () => {
  for (const bad of ['none', 'max']) {
    await assert.rejects(startServer(['--pooling', bad]), /--pooling/);
  }
});

// A client that goes away stops its embedding request: the engine is idle again long before the
// request would have ended. (A liveness bound, not a timing: the whole request takes far longer
// here.) Mutation tried: the route's RequestClientGone() check removed fails it.
test('a request whose client disconnects is cancelled', async () => {
  const s = await startServer(['-c', '512']);
  const text = Array(12).fill(PROMPTS[1]).join(' ');
  const controller = new AbortController();
  const request = fetch(`${s.url}/v1/embeddings`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ input: Array(2048).fill(text) }),
    signal: controller.signal,
  }).catch((e) => e);
  let health;
  for (let i = 0; i < 500; ++i) {  // tokenizing 2048 texts first takes a while
    health = (await s.json('GET', '/health')).body;
    if (health.active > 0) break;
    await new Promise((r) => setTimeout(r, 20));
  }
  assert.equal(health.active, 1, 'the request started');
  controller.abort();
  assert.equal((await request).name, 'AbortError');
  const deadline = Date.now() + 5000;
  while (Date.now() < deadline && (await s.json('GET', '/health')).body.active > 0) {
    await new Promise((r) => setTimeout(r, 50));
  }
  assert.equal((await s.json('GET', '/health')).body.active, 0, 'cancelled within 5 s');
});
