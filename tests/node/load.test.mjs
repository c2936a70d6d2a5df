// The load and fault suite: the server under hostile and broken clients, on loopback only, each
// case bounded in time. Slow clients, a burst of connections, clients that abort streams, kill -9
// during disk writes and strange files in the cache folder. (Oversized and chunked bodies, a busy
// port and SIGTERM with open streams are in bad_input.test.mjs and restart.test.mjs.)
import { test } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import net from 'node:net';
import { execFileSync } from 'node:child_process';
import { startServer, MODEL, STORY, waitFor } from './server.mjs';

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

function rssKiB(pid) {
  const m = fs.readFileSync(`/proc/${pid}/status`, 'utf8').match(/VmRSS:\s+(\d+) kB/);
  return Number(m[1]);
}

// One raw HTTP/1.1 exchange on a fresh connection: resolves with the status (0 if none came)
// and the socket error, if any.
function rawRequest(url, text) {
  return rawRequestFrom(url, text, undefined);
}

// rawRequest from a given local address (undefined: the system's choice).
function rawRequestFrom(url, text, localAddress) {
  const { hostname, port } = new URL(url);
  return new Promise((resolve) => {
    let data = '';
    let error = null;
    const sock = net.connect({ port: Number(port), host: hostname, localAddress }, () => sock.write(text));
    sock.setEncoding('latin1');
    sock.on('data', (d) => { data += d; });
    sock.on('error', (e) => { error = e; });
    sock.on('close', () => {
      const m = data.match(/^HTTP\/1\.1 (\d{3})/);
      resolve({ status: m ? Number(m[1]) : 0, error, data });
    });
  });
}

// Connections that send nothing and are kept until the test ends: what holds a server's
// connection slots. The server may turn one away with a 503 when it comes while every slot is
// taken, which a socket that never reads would not notice (it never sees the end either), so
// each keeps what it was sent. A slot is held until the server's thread has closed its
// connection, which can be after the client read the whole response and saw the close (the
// thread may not run again for a while on a loaded machine), and connections that come together
// are counted in the order their threads run, not the order they connected: so a connection
// opened just after another closed, or beside another, may be turned away although the test
// counted a free slot for it. `replaceTurnedAway` checks that such a one got the 503 (nothing
// else) and opens another in its place.
function idleConnections(url, localAddress) {
  const { hostname, port } = new URL(url);
  const sockets = [];
  const state = { connected: 0, closed: 0, turned_away: 0, errors: [] };
  const open = () => {
    const sock = net.connect({ port: Number(port), host: hostname, localAddress },
      () => { state.connected++; });
    sock.reply = '';
    sock.setEncoding('latin1');
    sock.on('data', (d) => { sock.reply += d; });
    sock.on('error', (e) => state.errors.push(e.code));
    sock.on('close', () => { state.closed++; });
    sockets.push(sock);
  };
  const replaceTurnedAway = () => {
    for (const sock of sockets.filter((x) => x.reply && !x.replaced)) {
      assert.match(sock.reply, /^HTTP\/1\.1 503 .*"code":"too_many_connections"/s,
        'an idle connection was sent something other than the 503');
      sock.replaced = true;
      state.turned_away++;
      open();
    }
  };
  // The connections the server holds, as far as the client can tell.
  const held = () => sockets.filter((x) => !x.reply && !x.destroyed).length;
  const destroy = () => { for (const sock of sockets) sock.destroy(); };
  return { open, replaceTurnedAway, held, destroy, state, sockets };
}

async function timed(fn) {
  const t0 = Date.now();
  const value = await fn();
  return { value, ms: Date.now() - t0 };
}

test('200 slow clients: /health and a completion still answer within a second; the slow ones get a 408', async () => {
  const s = await startServer(['--header-timeout', '3']);
  const { hostname, port } = new URL(s.url);
  const slow = [];
  for (let i = 0; i < 200; i++) {
    const sock = net.connect(Number(port), hostname, () => sock.write('POST /v1/completions HTTP/1.1\r\nHost: x\r\n'));
    sock.replies = '';
    sock.setEncoding('latin1');
    sock.on('data', (d) => { sock.replies += d; });
    sock.on('error', () => {});
    slow.push(sock);
  }
  // They trickle a header byte every 100 ms, which a per-read timeout would never end.
  const trickle = setInterval(() => {
    for (const sock of slow) if (!sock.destroyed) sock.write('X');
  }, 100);
  try {
    await sleep(500);
    for (let round = 0; round < 3; round++) {
      const health = await timed(() => s.json('GET', '/health'));
      assert.equal(health.value.status, 200);
      assert.ok(health.ms < 1000, `/health took ${health.ms} ms`);
      const done = await timed(() => s.client().completions.create({ model: MODEL, prompt: 'Once upon a time', max_tokens: 8, temperature: 0 }));
      assert.equal(done.value.choices[0].finish_reason, 'length');
      assert.ok(done.ms < 1000, `a completion took ${done.ms} ms`);
      console.log(`with 200 slow clients: /health ${health.ms} ms, completion ${done.ms} ms`);
      await sleep(300);
    }
    // Past the header deadline every slow client has its answer: 408, connection closed.
    assert.ok(await waitFor(() => slow.every((sock) => sock.replies.startsWith('HTTP/1.1 408')), { timeoutMs: 8000 }),
      `408s: ${slow.filter((sock) => sock.replies.startsWith('HTTP/1.1 408')).length} of 200`);
    assert.match(slow[0].replies, /"code":"request_timeout"/);
    assert.match(slow[0].replies, /--header-timeout/);
    const m = await s.metrics();
    assert.ok(m.promptcache_http_request_timeouts_total >= 200);
  } finally {
    clearInterval(trickle);
    for (const sock of slow) sock.destroy();
  }
});

test('connections beyond --max-connections get a 503 at once, not a hang or a reset', async () => {
  // A long header deadline: the idle connections must outlast the wait on a loaded machine.
  const s = await startServer(['--max-connections', '20', '--max-connections-per-client', '20',
    '--header-timeout', '60']);
  const probe = 'GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n';
  const idle = idleConnections(s.url);
  const served = async () => {
    const r = await rawRequest(s.url, 'GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n');
    const m = r.data.match(/^promptcache_http_connections (\d+)/m);
    return m ? Number(m[1]) : -1;
  };
  try {
    // 19 idle connections first, until the server serves all of them (its gauge counts the
    // /metrics probe too: 20), so that a loaded machine's slow accepts cannot pass for a lost
    // connection; then the 20th, and the limit is reached.
    for (let i = 0; i < 19; i++) idle.open();
    let gauge = -1;
    const all = await waitFor(async () => (gauge = await served()) === 20, { timeoutMs: 20000 });
    assert.ok(all, `the server serves ${gauge} connections, not 19 idle + the probe ` +
      `(client side: ${JSON.stringify(idle.state)})`);
    // The 20th can come while the server still counts the last /metrics probe (see
    // idleConnections) and be turned away: then another takes its place, until a probe is
    // refused while all 20 are held.
    idle.open();
    let last = null;
    const refused = await waitFor(async () => {
      idle.replaceTurnedAway();
      last = await rawRequest(s.url, probe);
      return last.status === 503 && idle.held() === 20;
    }, { timeoutMs: 20000 });
    assert.ok(refused, `no 503 within 20 s; the last probe got ${last?.status} ` +
      `(${last?.error?.code ?? 'no socket error'}; idle sockets: ${JSON.stringify(idle.state)})`);
    const r = await rawRequest(s.url, probe);
    assert.equal(r.status, 503);
    assert.equal(r.error, null);
    assert.match(r.data, /Retry-After: 1/);
    assert.match(r.data, /"code":"too_many_connections"/);
    // Refused for the total, not for the client address's share (which is 20 here too).
    assert.doesNotMatch(r.data, /--max-connections-per-client/);
    assert.equal(idle.held(), 20, JSON.stringify(idle.state));
  } finally {
    idle.destroy();
  }
  // Once they are gone the server serves again.
  assert.ok(await waitFor(async () => (await rawRequest(s.url, probe)).status === 200, { timeoutMs: 5000 }));
  assert.ok((await s.metrics()).promptcache_http_connections_refused_total >= 1);
});

test('one client address gets at most --max-connections-per-client; others are still served', async () => {
  const s = await startServer(['--max-connections', '20', '--max-connections-per-client', '5',
    '--header-timeout', '60']);
  const probe = 'GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n';
  // Every 127.x.y.z address reaches the loopback interface: .2 plays the greedy client.
  const from = (localAddress) => rawRequestFrom(s.url, probe, localAddress);
  const idle = idleConnections(s.url, '127.0.0.2');
  try {
    for (let i = 0; i < 5; i++) idle.open();
    // The fifth can be counted after a probe that came just behind it and be turned away (see
    // idleConnections): then another takes its place.
    let last = null;
    const refused = await waitFor(async () => {
      idle.replaceTurnedAway();
      last = await from('127.0.0.2');
      return last.status === 503 && idle.held() === 5;
    }, { timeoutMs: 20000 });
    assert.ok(refused, `no 503 for a sixth connection from 127.0.0.2; the last probe got ` +
      `${last?.status} (idle sockets: ${JSON.stringify(idle.state)})`);
    assert.match(last.data, /--max-connections-per-client/);
    // The server is far from its total: another address is served.
    assert.equal((await from('127.0.0.1')).status, 200);
  } finally {
    idle.destroy();
  }
  assert.ok(await waitFor(async () => (await from('127.0.0.2')).status === 200, { timeoutMs: 5000 }));
  const m = await s.metrics();
  assert.ok(m.promptcache_http_connections_refused_per_client_total >= 1);
});

test('500 connections in one burst: every one answered, no resets', async () => {
  // One client address: its share must cover the burst.
  const s = await startServer(['--max-connections-per-client', '512']);
  const results = await Promise.all(Array.from({ length: 500 }, () =>
    rawRequest(s.url, 'GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n')));
  const errors = results.filter((r) => r.error).map((r) => r.error.code);
  const statuses = {};
  for (const r of results) statuses[r.status] = (statuses[r.status] ?? 0) + 1;
  console.log(`burst of 500: statuses ${JSON.stringify(statuses)}, socket errors ${errors.length}`);
  assert.deepEqual(errors, []);
  assert.equal(statuses[200], 500);
});

test('1,000 streams aborted by their clients: RSS stays flat, nothing left running', async () => {
  const s = await startServer(['-c', '100000', '--allow-long-context']);
  const client = s.client();
  const abortOne = async () => {
    const controller = new AbortController();
    const stream = await client.completions.create(
      { model: MODEL, prompt: STORY, max_tokens: 90000, ignore_eos: true, stream: true },
      { signal: controller.signal });
    let pieces = 0;
    for await (const chunk of stream) {
      if (chunk.choices[0]?.text) pieces++;
      if (pieces === 3) controller.abort();
    }
  };
  const run = async (n, concurrency) => {
    let next = 0;
    await Promise.all(Array.from({ length: concurrency }, async () => {
      while (next < n) {
        next++;
        await abortOne();
      }
    }));
  };
  await run(100, 8);  // warm up: the cache fills, thread stacks and buffers are touched
  const start = rssKiB(s.child.pid);
  await run(1000, 8);
  assert.ok(await waitFor(async () => (await s.metrics()).promptcache_requests_active === 0, { timeoutMs: 5000 }));
  const end = rssKiB(s.child.pid);
  console.log(`1,000 aborted streams: RSS ${(start / 1024).toFixed(1)} MiB -> ${(end / 1024).toFixed(1)} MiB`);
  assert.ok(end - start < 32 * 1024, `RSS grew from ${start} to ${end} KiB`);
  const m = await s.metrics();
  assert.equal(m.promptcache_requests_total, 1100);
  assert.ok(s.alive());
  const r = await client.completions.create({ model: MODEL, prompt: 'Once upon a time', max_tokens: 4, temperature: 0 });
  assert.equal(r.choices[0].finish_reason, 'length');
});

// Different from their first token on, so that each has blocks of its own to write.
const PROMPTS = Array.from({ length: 12 }, (_, i) => `Day ${i + 1}. ${STORY}`);

async function greedy(server, prompt) {
  const r = await server.client().completions.create({ model: MODEL, prompt, max_tokens: 12, temperature: 0, ignore_eos: true });
  return r.choices[0].text;
}

test('kill -9 while the disk tier writes, then strange files in the folder: the restarted server answers as an uncached one', async (t) => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'promptcache-kill9-'));
  t.after(() => fs.rmSync(dir, { recursive: true, force: true }));
  const uncached = await startServer(['--no-prefix-cache']);
  const expected = [];
  for (const p of PROMPTS) expected.push(await greedy(uncached, p));
  await uncached.stop();

  // Each round fills the cache, asks for a save and is killed a few milliseconds into it (the
  // last one once the save has finished, so that the folder surely holds files).
  for (let round = 0; round < 4; round++) {
    const s = await startServer(['--cache-dir', dir]);
    for (const p of PROMPTS) await greedy(s, p);
    const save = s.json('POST', '/v1/cache/save', {}).catch(() => null);
    if (round < 3) await sleep(2 * round); else await save;
    s.child.kill('SIGKILL');
    await save;
    await s.stop();
  }
  // Block files live in a folder per model.
  const sub = fs.readdirSync(dir, { withFileTypes: true }).find((e) => e.isDirectory());
  assert.ok(sub, 'the disk tier made its model folder');
  const folder = path.join(dir, sub.name);
  const written = fs.readdirSync(folder).filter((f) => f.endsWith('.kvb'));
  console.log(`after four kill -9s: ${written.length} block files`);
  assert.ok(written.length > 0, 'the killed servers wrote to the disk tier');
  // Things named like block files that are not: a directory, a FIFO, a symlink, an empty file.
  const name = (c) => c.repeat(32) + '.kvb';
  fs.mkdirSync(path.join(folder, name('a')));
  execFileSync('mkfifo', [path.join(folder, name('b'))]);
  fs.symlinkSync('/etc/passwd', path.join(folder, name('c')));
  fs.writeFileSync(path.join(folder, name('d')), '');

  const s = await startServer(['--cache-dir', dir]);
  for (let i = 0; i < PROMPTS.length; i++) {
    assert.equal(await greedy(s, PROMPTS[i]), expected[i], `prompt ${i} after kill -9`);
  }
  assert.ok((await s.metrics()).promptcache_cache_disk_errors_total >= 3, 'the directory, FIFO and symlink are counted');
  // Twice: the second time from whatever the cache holds now.
  for (let i = 0; i < PROMPTS.length; i++) {
    assert.equal(await greedy(s, PROMPTS[i]), expected[i], `prompt ${i}, cached`);
  }
  assert.ok(s.alive());
  assert.equal((await s.stop()).code, 0, s.stderr());
});
