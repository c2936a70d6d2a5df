// Bad input of every kind gets an OpenAI-style error object with the right 4xx status, and the
// server goes on serving; so do an API key, the limits, a full queue and an aborted stream.
import { test, before } from 'node:test';
import assert from 'node:assert/strict';
import OpenAI from 'openai';
import { spawnSync } from 'node:child_process';
import net from 'node:net';
import { startServer, MODEL, MODEL_PATH, BIN, STORY, waitFor } from './server.mjs';

let server;
before(async () => {
  server = await startServer(['-c', '256', '--max-prompt-tokens', '200', '--max-tokens-limit', '300',
                              '--max-body-bytes', '65536']);
});

const chat = (extra = {}) => ({ model: MODEL, messages: [{ role: 'user', content: 'hi' }], max_tokens: 4, ...extra });

function assertError(r, status, { param, code, mentions = [] } = {}) {
  assert.equal(r.status, status, r.text);
  assert.ok(r.body && r.body.error, `an error object: ${r.text}`);
  const e = r.body.error;
  assert.equal(typeof e.message, 'string');
  assert.ok(e.message.length > 0);
  assert.equal(typeof e.type, 'string');
  assert.ok('param' in e && 'code' in e, r.text);
  if (param !== undefined) assert.equal(e.param, param, r.text);
  if (code !== undefined) assert.equal(e.code, code, r.text);
  for (const m of mentions) assert.ok(e.message.includes(m), `"${e.message}" mentions ${m}`);
}

async function stillServing() {
  const r = await server.json('POST', '/v1/chat/completions', chat({ temperature: 0 }));
  assert.equal(r.status, 200, r.text);
  assert.ok(server.alive());
}

test('malformed bodies and wrong types are 400s', async () => {
  const cases = [
    ['/v1/chat/completions', '{"model": "stories260K", "messages": [', null],
    ['/v1/chat/completions', '', null],
    ['/v1/chat/completions', '[]', null],
    ['/v1/chat/completions', '"just a string"', null],
    // (Without `model` the served model answers: tests/node/openai_compat.test.mjs.)
    ['/v1/chat/completions', { model: 42, messages: [{ role: 'user', content: 'x' }] }, 'model'],
    ['/v1/chat/completions', { model: MODEL }, 'messages'],
    ['/v1/chat/completions', { model: MODEL, messages: [] }, 'messages'],
    ['/v1/chat/completions', { model: MODEL, messages: 'hello' }, 'messages'],
    ['/v1/chat/completions', { model: MODEL, messages: [{ role: 'wizard', content: 'x' }] }, 'messages[0].role'],
    ['/v1/chat/completions', { model: MODEL, messages: [{ role: 'user', content: 7 }] }, 'messages[0].content'],
    ['/v1/chat/completions', { model: MODEL, messages: [{ role: 'user', content: [{ type: 'image_url', image_url: {} }] }] },
     'messages[0].content[0].type'],
    ['/v1/chat/completions', chat({ max_tokens: -1 }), 'max_tokens'],
    ['/v1/chat/completions', chat({ max_tokens: 0 }), 'max_tokens'],
    ['/v1/chat/completions', chat({ max_tokens: 1e12 }), 'max_tokens'],
    ['/v1/chat/completions', chat({ max_tokens: '10' }), 'max_tokens'],
    ['/v1/chat/completions', chat({ temperature: 5 }), 'temperature'],
    ['/v1/chat/completions', chat({ top_p: 'high' }), 'top_p'],
    ['/v1/chat/completions', chat({ n: 17 }), 'n'],
    ['/v1/chat/completions', chat({ stream: 'yes' }), 'stream'],
    ['/v1/chat/completions', chat({ stop: [1, 2] }), 'stop[0]'],
    ['/v1/completions', { model: MODEL }, 'prompt'],
    ['/v1/completions', { model: MODEL, prompt: { text: 'x' } }, 'prompt'],
    ['/v1/completions', { model: MODEL, prompt: [1, 99999] }, 'prompt'],
    ['/v1/completions', { model: MODEL, prompt: [1, -3] }, 'prompt[1]'],
    ['/v1/completions', { model: MODEL, prompt: Array(17).fill('a') }, 'prompt'],
    ['/v1/completions', { model: MODEL, prompt: ['a', 5] }, 'prompt[1]'],
  ];
  for (const [route, body, param] of cases) {
    const r = await server.json('POST', route, body);
    assertError(r, 400, { param });
    assert.equal(r.body.error.type, 'invalid_request_error');
  }
  await stillServing();
});

test('bad UTF-8 in a string is a 400', async () => {
  const head = Buffer.from('{"model":"stories260K","messages":[{"role":"user","content":"ab');
  const tail = Buffer.from('"}]}');
  for (const bad of [[0xff], [0xc3, 0x28], [0xed, 0xa0, 0x80], [0xe2, 0x82]]) {
    const r = await server.json('POST', '/v1/chat/completions', Buffer.concat([head, Buffer.from(bad), tail]));
    assertError(r, 400);
  }
  await stillServing();
});

test('unknown model is a 404 through the OpenAI client', async () => {
  const client = server.client();
  await assert.rejects(client.chat.completions.create(chat({ model: 'gpt-4o' })), (e) => {
    assert.ok(e instanceof OpenAI.NotFoundError, String(e));
    assert.equal(e.status, 404);
    assert.equal(e.code, 'model_not_found');
    assert.equal(e.param, 'model');
    return true;
  });
  await assert.rejects(client.chat.completions.create(chat({ tfs_z: 0.9 })), (e) => e instanceof OpenAI.BadRequestError);
  await stillServing();
});

test('prompts over the limits and the context name the numbers', async () => {
  const long = STORY;  // about 300 tokens; the limit is 200 and the context 256
  assertError(await server.json('POST', '/v1/completions', { model: MODEL, prompt: long }), 400,
    { param: 'prompt', code: 'prompt_too_long', mentions: ['200'] });
  const tokens150 = Array.from({ length: 150 }, (_, i) => 300 + (i % 50));
  assertError(await server.json('POST', '/v1/completions', { model: MODEL, prompt: tokens150, max_tokens: 200 }), 400,
    { param: 'max_tokens', code: 'context_length_exceeded', mentions: ['256', '150', '200'] });
  assertError(await server.json('POST', '/v1/completions', { model: MODEL, prompt: 'x', max_tokens: 301 }), 400,
    { param: 'max_tokens', mentions: ['300'] });
  // Without max_tokens the completion may fill the context.
  const r = await server.json('POST', '/v1/completions', { model: MODEL, prompt: tokens150, ignore_eos: true, temperature: 0 });
  assert.equal(r.status, 200, r.text);
  assert.equal(r.body.usage.completion_tokens, 256 - 150);
  assert.equal(r.body.choices[0].finish_reason, 'length');
});

// Ollama's routes are held to the same limits (they had their own checks, which let a prompt
// under the context but over --max-prompt-tokens through).
test("Ollama's routes hold --max-prompt-tokens and the context too", async () => {
  const words = STORY.split(' ');
  let text = '';
  for (let n = 40; n <= words.length; n += 5) {
    text = words.slice(0, n).join(' ');
    if ((await server.tokenize({ content: text, add_special: true })).length > 210) break;
  }
  const n = (await server.tokenize({ content: text, add_special: true })).length;
  assert.ok(n > 200 && n < 256, `${n} tokens: over the prompt limit, within the context`);
  for (const [route, body] of [['/api/generate', { prompt: text, raw: true }],
    ['/api/chat', { messages: [{ role: 'user', content: text }] }]]) {
    const r = await server.json('POST', route, { model: MODEL, stream: false, ...body });
    assert.equal(r.status, 400, r.text);
    assert.match(r.body.error, /more than this server's limit of 200 \(--max-prompt-tokens\)/);
  }
  const r = await server.json('POST', '/api/generate',
    { model: MODEL, prompt: 'x', raw: true, stream: false, options: { num_predict: 301 } });
  assert.equal(r.status, 400, r.text);
  assert.match(r.body.error, /300/);
  await stillServing();
});

test('over-context prompts are 400 even within the prompt limit', async () => {
  const s = await startServer(['-c', '64']);
  const r = await s.json('POST', '/v1/completions', { model: MODEL, prompt: STORY });
  assertError(r, 400, { code: 'context_length_exceeded', mentions: ['64'] });
  assert.equal((await s.json('GET', '/health')).status, 200);
});

test('a body over --max-body-bytes is a 413', async () => {
  const r = await server.json('POST', '/v1/completions', { model: MODEL, prompt: 'x'.repeat(70000) });
  assertError(r, 413, { code: 'request_too_large' });
  await stillServing();
});

test('a second server on a busy port is a one-line error, not a second listener', async () => {
  const port = new URL(server.url).port;
  const r = spawnSync(BIN, ['serve', '-m', MODEL_PATH, '--port', port, '-t', '1'], { encoding: 'utf8', timeout: 20000 });
  assert.equal(r.status, 1, r.stderr);
  const lines = r.stderr.trim().split('\n').filter((l) => l.startsWith('promptcache: error:'));
  assert.equal(lines.length, 1, r.stderr);
  assert.match(lines[0], new RegExp(`cannot listen on 127\\.0\\.0\\.1:${port}`));
  await stillServing();
});

test('--max-body-bytes outside 1024 B..1 GiB is refused (-1 is not "unlimited")', () => {
  for (const v of ['-1', '100', '4294967296']) {
    const r = spawnSync(BIN, ['serve', '-m', MODEL_PATH, '--port', '0', '--max-body-bytes', v], { encoding: 'utf8', timeout: 20000 });
    assert.equal(r.status, 1, `${v}: ${r.stderr}`);
    assert.match(r.stderr, /--max-body-bytes must be between 1024 and 1073741824/);
  }
});

test('a chunked body over --max-body-bytes is a 413 too, not kept in memory nor echoed', async () => {
  // A stream body has no Content-Length: fetch sends it chunked.
  const chunk = new TextEncoder().encode('x'.repeat(16384));
  let sent = 0;
  const body = new ReadableStream({
    pull(controller) {
      if (sent >= 64) return controller.close();  // 1 MiB in all, 16 times the limit
      sent++;
      controller.enqueue(chunk);
    },
  });
  let res;
  try {
    res = await fetch(server.url + '/v1/completions', {
      method: 'POST', headers: { 'content-type': 'application/json' }, body, duplex: 'half',
    });
  } catch (e) {
    assert.fail(`the server should answer 413, not drop the connection: ${e}`);
  }
  const text = await res.text();
  assert.equal(res.status, 413, text);
  assert.equal(JSON.parse(text).error.code, 'request_too_large');
  assert.ok(!text.includes('xxxx'), 'the body is not echoed');
  await stillServing();
});

test('a POST without any body (no Content-Length, as curl -X POST sends) is read as empty', async () => {
  const { hostname, port } = new URL(server.url);
  const raw = (route) => new Promise((resolve, reject) => {
    const sock = net.connect(Number(port), hostname, () => {
      sock.write(`POST ${route} HTTP/1.1\r\nHost: ${hostname}\r\nConnection: close\r\n\r\n`);
    });
    let data = '';
    sock.on('data', (d) => { data += d; });
    sock.on('end', () => resolve(data));
    sock.on('error', reject);
  });
  // This server has no disk tier: the handler's own answer, not a generic "could not be processed".
  const save = await raw('/v1/cache/save');
  assert.match(save, /^HTTP\/1\.1 400/, save);
  assert.match(save, /no disk tier configured \(--cache-dir\)/, save);
  const completion = await raw('/v1/completions');
  assert.match(completion, /^HTTP\/1\.1 400/, completion);
  assert.match(completion, /not valid JSON/, completion);
});

test('a JSON body sent as a form (curl -d without a Content-Type) is read whole', async () => {
  // cpp-httplib parses form-encoded bodies itself and refuses those over 8192 bytes; the server
  // reads every body as JSON, within --max-body-bytes, whatever its Content-Type.
  const body = JSON.stringify({ model: MODEL, prompt: 'Once upon a time', max_tokens: 2 }) + ' '.repeat(20000);
  const r = await fetch(`${server.url}/v1/completions`, {
    method: 'POST', headers: { 'content-type': 'application/x-www-form-urlencoded' }, body,
  });
  const text = await r.text();
  assert.equal(r.status, 200, text);
  assert.equal(JSON.parse(text).usage.completion_tokens, 2);
  const big = await fetch(`${server.url}/v1/completions`, {
    method: 'POST', headers: { 'content-type': 'application/x-www-form-urlencoded' }, body: body + ' '.repeat(70000),
  });
  assertError({ status: big.status, text: '', body: await big.json() }, 413, { code: 'request_too_large' });
  await stillServing();
});

test('unknown routes are 404, wrong methods 405', async () => {
  assertError(await server.json('GET', '/v1/nothing'), 404, { code: 'unknown_url' });
  assertError(await server.json('POST', '/v2/chat/completions', chat()), 404);
  const r = await server.json('GET', '/v1/chat/completions');
  assertError(r, 405, { code: 'method_not_allowed' });
  assert.equal(r.headers.get('allow'), 'POST');
  assertError(await server.json('DELETE', '/v1/models'), 405);
  assertError(await server.json('PUT', '/v1/cache'), 405);
  await stillServing();
});

test('--api-key: a wrong or missing key is a 401, /health stays open, /metrics only with --metrics-public', async () => {
  const s = await startServer(['--api-key', 'sekrit']);
  await assert.rejects(s.client({ apiKey: 'wrong' }).models.list(), (e) => {
    assert.ok(e instanceof OpenAI.AuthenticationError, String(e));
    assert.equal(e.code, 'invalid_api_key');
    return true;
  });
  assertError(await s.json('POST', '/v1/chat/completions', chat()), 401);
  assertError(await s.json('GET', '/v1/cache'), 401);
  assert.equal((await s.json('GET', '/health')).status, 200);
  assertError(await s.json('GET', '/metrics'), 401);
  assert.equal((await s.json('GET', '/metrics', undefined, { authorization: 'Bearer sekrit' })).status, 200);
  const ok = await s.client({ apiKey: 'sekrit' }).chat.completions.create(chat());
  assert.equal(ok.object, 'chat.completion');
  const open = await startServer(['--api-key', 'sekrit', '--metrics-public']);
  assert.equal((await open.json('GET', '/metrics')).status, 200);
  assertError(await open.json('GET', '/v1/cache'), 401);
});

test('a client that aborts a stream frees its request at once', async () => {
  const s = await startServer(['-c', '100000', '--allow-long-context', '--parallel', '1', '--max-queue', '0']);
  const client = s.client();
  const controller = new AbortController();
  // Far more tokens than could be generated in the time the test takes.
  const stream = await client.completions.create(
    { model: MODEL, prompt: 'Once upon a time', max_tokens: 90000, ignore_eos: true, temperature: 0, stream: true },
    { signal: controller.signal });
  let pieces = 0;
  // The client ends the iteration quietly once aborted, and closes the connection.
  for await (const chunk of stream) {
    if (chunk.choices[0]?.text) pieces++;
    if (pieces === 5) controller.abort();
  }
  assert.ok(controller.signal.aborted);
  assert.ok(pieces >= 5 && pieces < 90000);
  assert.ok(await waitFor(async () => (await s.metrics()).promptcache_requests_active === 0, { timeoutMs: 3000 }),
    'the aborted request stops within 3 s');
  const m = await s.metrics();
  assert.equal(m.promptcache_requests_total, 1);
  assert.ok(m.promptcache_generated_tokens_total < 90000);
  // With --parallel 1 and no queue, the next request only succeeds if the slot was freed.
  const r = await client.completions.create({ model: MODEL, prompt: 'Once upon a time', max_tokens: 5, temperature: 0 });
  assert.equal(r.choices[0].finish_reason, 'length');
});

test('--kv-ram: a request that could never fit is a 400 naming the flag; smaller ones are served', async () => {
  // stories260K holds 640 bytes of K/V per token (f16): 0.5 MiB is 819 tokens.
  const s = await startServer(['--kv-ram', '0.5']);
  const big = await s.json('POST', '/v1/completions', { model: MODEL, prompt: 'Once upon a time', max_tokens: 1000 });
  assertError(big, 400);
  assert.match(big.body.error.message, /--kv-ram/);
  const results = await Promise.all(Array.from({ length: 4 }, () =>
    s.client().completions.create({ model: MODEL, prompt: 'Once upon a time', max_tokens: 40, temperature: 0 })));
  for (const r of results) assert.equal(r.choices[0].text, results[0].choices[0].text);
  const m = await s.metrics();
  assert.ok(m['promptcache_cache_bytes{tier="ram"}'] <= 0.5 * 1024 * 1024);
});

test('a full queue is a 503 and the server recovers', async () => {
  const s = await startServer(['-c', '100000', '--allow-long-context', '--parallel', '1', '--max-queue', '0']);
  const client = s.client();
  const controller = new AbortController();
  const stream = await client.completions.create(
    { model: MODEL, prompt: 'Once upon a time', max_tokens: 90000, ignore_eos: true, stream: true },
    { signal: controller.signal });
  const iterator = stream[Symbol.asyncIterator]();
  await iterator.next();  // the long request is running
  const busy = await s.json('POST', '/v1/completions', { model: MODEL, prompt: 'Hello', max_tokens: 2 });
  assertError(busy, 503, { code: 'overloaded' });
  assert.equal(busy.body.error.type, 'server_error');
  await assert.rejects(client.completions.create({ model: MODEL, prompt: 'Hello', max_tokens: 2 }),
    (e) => e instanceof OpenAI.InternalServerError && e.status === 503);
  controller.abort();
  await iterator.return?.().catch(() => {});
  assert.ok(await waitFor(async () => (await s.metrics()).promptcache_requests_active === 0, { timeoutMs: 3000 }));
  assert.ok((await s.metrics()).promptcache_requests_rejected_total >= 2);
  const r = await client.completions.create({ model: MODEL, prompt: 'Hello', max_tokens: 2 });
  assert.equal(r.object, 'text_completion');
});
