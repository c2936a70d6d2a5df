// The disk tier across restarts: a cache filled by one server is found by the next one started
// with the same --cache-dir; corrupted cache files are a miss, never a crash.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import net from 'node:net';
import { startServer, MODEL, STORY, expectedCached } from './server.mjs';

const PROMPT = STORY + ' And then the rain came.';

function cacheFiles(dir) {
  const out = [];
  for (const entry of fs.readdirSync(dir, { withFileTypes: true, recursive: true })) {
    if (entry.isFile()) out.push(path.join(entry.parentPath ?? entry.path, entry.name));
  }
  return out;
}

async function complete(server) {
  return server.client().completions.create({ model: MODEL, prompt: PROMPT, max_tokens: 16, temperature: 0, ignore_eos: true });
}

test('a restarted server finds the cache on disk; corrupt files are a miss', async (t) => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'promptcache-restart-'));
  t.after(() => fs.rmSync(dir, { recursive: true, force: true }));

  // 1. Fill the cache and stop: the engine writes its cache to the disk tier on shutdown.
  const first = await startServer(['--cache-dir', dir]);
  const tokens = await first.tokenize({ prompt: PROMPT });
  const cold = await complete(first);
  assert.equal(cold.usage.prompt_tokens_details.cached_tokens, 0);
  const stopped = await first.stop();
  assert.equal(stopped.code, 0, `clean exit; stderr:\n${first.stderr()}`);
  const files = cacheFiles(dir);
  assert.ok(files.length > 0, 'the cache directory holds block files');

  // 2. Same directory: the first request is a hit, with the same output.
  const second = await startServer(['--cache-dir', dir]);
  const warm = await complete(second);
  assert.equal(warm.usage.prompt_tokens_details.cached_tokens, expectedCached(tokens.length, tokens.length));
  assert.equal(warm.choices[0].text, cold.choices[0].text);
  const m = await second.metrics();
  assert.ok(m.promptcache_cache_disk_loads_total > 0);
  assert.ok(m['promptcache_cache_bytes{tier="disk"}'] > 0);
  assert.equal((await second.stop()).code, 0);

  // 3. Corrupt every file (flip bytes in the middle; truncate every other one): a miss, the same
  // output, and the server goes on serving.
  const now = cacheFiles(dir);
  assert.ok(now.length > 0);
  now.forEach((file, i) => {
    const data = fs.readFileSync(file);
    if (i % 2 === 0) {
      for (let j = Math.floor(data.length / 2); j < Math.min(data.length, Math.floor(data.length / 2) + 64); j++) data[j] ^= 0x5a;
      fs.writeFileSync(file, data);
    } else {
      fs.writeFileSync(file, data.subarray(0, Math.floor(data.length / 3)));
    }
  });
  const third = await startServer(['--cache-dir', dir]);
  const miss = await complete(third);
  assert.equal(miss.usage.prompt_tokens_details.cached_tokens, 0);
  assert.equal(miss.choices[0].text, cold.choices[0].text);
  const again = await complete(third);
  assert.ok(again.usage.prompt_tokens_details.cached_tokens > 0, 'recomputed blocks are cached again');
  assert.ok(third.alive());
  assert.ok((await third.metrics()).promptcache_cache_disk_errors_total > 0);
  assert.equal((await third.stop()).code, 0);
});

test('a stream cut by shutdown still ends with a final chunk and [DONE]', async () => {
  const server = await startServer();
  const res = await fetch(server.url + '/v1/completions', {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ model: MODEL, prompt: 'Once upon a time', max_tokens: 2000, stream: true, ignore_eos: true }),
  });
  assert.equal(res.status, 200);
  const reader = res.body.getReader();
  const decoder = new TextDecoder();
  let text = '';
  // Wait for generated text, then stop the server mid-stream.
  while (!text.includes('"text"')) {
    const { value, done } = await reader.read();
    assert.ok(!done, 'the stream started');
    text += decoder.decode(value, { stream: true });
  }
  const stopping = server.stop();
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    text += decoder.decode(value, { stream: true });
  }
  assert.equal((await stopping).code, 0, server.stderr());
  const events = text.split('\n\n').filter((e) => e.startsWith('data: '));
  assert.equal(events.at(-1), 'data: [DONE]', text.slice(-500));
  const last = JSON.parse(events.at(-2).slice(6));
  assert.equal(last.choices[0].finish_reason, 'cancelled');
});

test('SIGTERM saves the cache at once, even while a client holds a half-sent request', async (t) => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'promptcache-sigterm-'));
  t.after(() => fs.rmSync(dir, { recursive: true, force: true }));
  const server = await startServer(['--cache-dir', dir]);
  await complete(server);
  assert.equal(cacheFiles(dir).filter((f) => f.endsWith('.kvb')).length, 0, 'nothing on disk yet');
  // A client that sends half its headers and then nothing.
  const { hostname, port } = new URL(server.url);
  const sock = net.connect(Number(port), hostname, () => sock.write('POST /v1/completions HTTP/1.1\r\nHost: x\r\n'));
  sock.on('error', () => {});
  await new Promise((r) => setTimeout(r, 200));
  const stopping = server.stop(60000);
  const deadline = Date.now() + 5000;
  while (cacheFiles(dir).filter((f) => f.endsWith('.kvb')).length === 0 && Date.now() < deadline) {
    await new Promise((r) => setTimeout(r, 50));
  }
  assert.ok(cacheFiles(dir).filter((f) => f.endsWith('.kvb')).length > 0, 'the cache was saved within 5 s of SIGTERM');
  sock.destroy();
  assert.equal((await stopping).code, 0, server.stderr());
});

test('a half-sent request does not hold shutdown: reads end when the server stops', async () => {
  const server = await startServer(['--shutdown-timeout', '60']);
  const { hostname, port } = new URL(server.url);
  const sock = net.connect(Number(port), hostname, () => sock.write('POST /v1/completions HTTP/1.1\r\nHost: x\r\n'));
  sock.on('error', () => {});
  await new Promise((r) => setTimeout(r, 200));
  const t0 = Date.now();
  const result = await server.stop(20000);
  assert.equal(result.code, 0, server.stderr());
  assert.ok(Date.now() - t0 < 5000, `exited after ${Date.now() - t0} ms`);
  assert.doesNotMatch(server.stderr(), /shutdown timeout/);
  sock.destroy();
});

test('shutdown is bounded: --shutdown-timeout ends the wait for open connections, a second signal at once', async () => {
  // A client that asks for a large response (8 MB of text) and never reads it: the server's
  // write blocks once the socket buffers are full, and its connection stays open.
  const body = JSON.stringify({ tokens: new Array(2000000).fill(300) });
  const hold = async (server) => {
    const { hostname, port } = new URL(server.url);
    const sock = net.connect(Number(port), hostname, () => {
      sock.pause();
      sock.write(`POST /detokenize HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: ${body.length}\r\n\r\n`);
      sock.write(body);
    });
    sock.on('error', () => {});
    await new Promise((r) => setTimeout(r, 2000));
    return sock;
  };
  const args = ['--max-body-bytes', '16000000'];
  const a = await startServer([...args, '--shutdown-timeout', '1']);
  const sa = await hold(a);
  let t0 = Date.now();
  const ra = await a.stop(20000);
  assert.equal(ra.code, 0, a.stderr());
  assert.ok(Date.now() - t0 < 5000, `exited after ${Date.now() - t0} ms`);
  assert.match(a.stderr(), /shutdown timeout/);
  sa.destroy();

  const b = await startServer([...args, '--shutdown-timeout', '60']);
  const sb = await hold(b);
  t0 = Date.now();
  const exited = new Promise((resolve) => b.child.on('exit', (code) => resolve(code)));
  b.child.kill('SIGTERM');
  await new Promise((r) => setTimeout(r, 300));
  b.child.kill('SIGTERM');
  assert.equal(await exited, 1);
  assert.ok(Date.now() - t0 < 5000, `exited after ${Date.now() - t0} ms`);
  assert.match(b.stderr(), /second signal/);
  sb.destroy();
});
