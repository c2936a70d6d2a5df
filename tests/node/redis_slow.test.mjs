// A Redis that answers one byte every 50 ms: each socket read gets its byte well within
// --cache-redis-timeout, so only a total deadline ends a lookup. Such a store must not stop the
// server: a request needing a lookup waits at most --cache-redis-deadline and computes the rest,
// an unrelated request is not held up behind it, and after a few late lookups the circuit breaker
// stops asking the store at all (and probes it again after a cool-down). Before the deadline, the
// lookup took 64.7 s and an unrelated "Hi" 62.7 s.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import net from 'node:net';
import { spawnSync } from 'node:child_process';
import { startServer, MODEL, MODEL_PATH, BIN, STORY, waitFor } from './server.mjs';

const R = 'tier="remote"';
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

// The fake store: parses RESP commands (arrays of bulk strings) and queues a reply for each (GET:
// a 100 kB value; EXISTS: 0; anything else: +OK), sent one byte per `byteMs` on each connection.
// `commands` counts what it was asked, by name.
async function startTricklingRedis({ byteMs = 50 } = {}) {
  const commands = {};
  const sockets = new Set();
  const server = net.createServer((sock) => {
    sockets.add(sock);
    let input = Buffer.alloc(0);
    let output = Buffer.alloc(0);
    const timer = setInterval(() => {
      if (output.length === 0 || sock.destroyed) return;
      sock.write(output.subarray(0, 1));
      output = output.subarray(1);
    }, byteMs);
    sock.on('data', (d) => {
      input = Buffer.concat([input, d]);
      for (;;) {
        const parsed = parseCommand(input);
        if (!parsed) break;
        input = input.subarray(parsed.end);
        const name = parsed.args[0].toUpperCase();
        commands[name] = (commands[name] ?? 0) + 1;
        const reply = name === 'GET' ? `$100000\r\n${'x'.repeat(100000)}\r\n`
          : name === 'EXISTS' ? ':0\r\n' : '+OK\r\n';
        output = Buffer.concat([output, Buffer.from(reply)]);
      }
    });
    sock.on('error', () => {});
    sock.on('close', () => {
      clearInterval(timer);
      sockets.delete(sock);
    });
  });
  await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve));
  return {
    url: `redis://127.0.0.1:${server.address().port}`,
    commands,
    close: () => {
      for (const s of sockets) s.destroy();
      server.close();
    },
  };
}

// One command at the start of `buf`: { args, end }, or null while it is incomplete.
function parseCommand(buf) {
  let at = 0;
  const line = () => {
    const eol = buf.indexOf('\r\n', at);
    if (eol < 0) return null;
    const s = buf.subarray(at, eol).toString();
    at = eol + 2;
    return s;
  };
  const head = line();
  if (head === null) return null;
  assert.match(head, /^\*\d+$/, 'the client sends RESP arrays');
  const args = [];
  for (let i = 0; i < Number(head.slice(1)); i++) {
    const len = line();
    if (len === null) return null;
    const n = Number(len.slice(1));
    if (buf.length < at + n + 2) return null;
    args.push(buf.subarray(at, at + n).toString());
    at += n + 2;
  }
  return { args, end: at };
}

async function complete(server, prompt) {
  const t0 = Date.now();
  const r = await server.client().completions.create({
    model: MODEL, prompt, max_tokens: 8, temperature: 0, ignore_eos: true,
  });
  return { r, ms: Date.now() - t0 };
}

const tier = (m, name) => m[`promptcache_cache_tier_${name}{${R}}`] ?? 0;

test('a Redis answering a byte every 50 ms: lookups end at the deadline, others are not held up, the breaker opens', async (t) => {
  const redis = await startTricklingRedis();
  t.after(() => redis.close());
  const deadlineMs = 500;
  const s = await startServer(['--cache-redis', redis.url, '--cache-redis-deadline', String(deadlineMs)]);
  const reference = await startServer(['--no-prefix-cache']);

  // A prompt of whole blocks that no tier holds: its lookup goes to Redis. "Hi" is too short to
  // be looked up, and is sent while that lookup is under way.
  const prompt = 'The slow store. ' + STORY;
  const lookup = complete(s, prompt);
  await waitFor(() => (redis.commands.GET ?? 0) > 0, { stepMs: 5 });
  const hi = await complete(s, 'Hi');
  const first = await lookup;
  console.log(`with a trickling Redis: the lookup's request ${first.ms} ms, "Hi" ${hi.ms} ms`);
  // Liveness bounds (they took 64.7 s and 62.7 s): the deadline plus computing a short prompt.
  assert.ok(first.ms < deadlineMs + 4000, `the request needing a lookup took ${first.ms} ms`);
  assert.ok(hi.ms < 4000, `"Hi" took ${hi.ms} ms`);
  assert.equal(first.r.usage.prompt_tokens_details.cached_tokens, 0);
  const expected = await complete(reference, prompt);
  assert.equal(first.r.choices[0].text, expected.r.choices[0].text, 'computed, as without a cache');
  let m = await s.metrics();
  assert.ok(tier(m, 'deadline_misses_total') >= 1, JSON.stringify(m));
  assert.equal(tier(m, 'loads_total'), 0);

  // More lookups, each late: after three in a row the breaker opens (lookups within the 100 ms
  // reconnect backoff of a failure miss without being sent, and are not counted).
  for (let i = 0; i < 10 && tier(await s.metrics(), 'breaker_open') !== 1; i++) {
    const { ms } = await complete(s, `Lookup ${i}. ${STORY}`);
    assert.ok(ms < deadlineMs + 4000, `lookup ${i} took ${ms} ms`);
    await sleep(150);
  }
  m = await s.metrics();
  assert.equal(tier(m, 'breaker_open'), 1, 'the breaker opened');
  assert.equal(tier(m, 'breaker_opens_total'), 1);
  assert.ok(tier(m, 'deadline_misses_total') >= 3);
  assert.match(s.stderr(), /failed or late lookups in a row: not asked for 5 s/);

  // Open: a request needing a lookup does not ask the store at all.
  const gets = redis.commands.GET;
  const skippedBefore = tier(m, 'skipped_total');
  await complete(s, `While open. ${STORY}`);
  assert.equal(redis.commands.GET, gets, 'no GET while the breaker is open');
  assert.equal(tier(await s.metrics(), 'skipped_total'), skippedBefore + 1);

  // After the 5 s cool-down one lookup probes the store; late again, the breaker opens again, for
  // twice as long.
  await sleep(5200);
  const probe = await complete(s, `The probe. ${STORY}`);
  assert.ok(probe.ms < deadlineMs + 4000, `the probe's request took ${probe.ms} ms`);
  assert.ok(redis.commands.GET > gets, 'the probe asked the store');
  m = await s.metrics();
  assert.equal(tier(m, 'breaker_open'), 1);
  assert.equal(tier(m, 'breaker_opens_total'), 2);
  // Writes still queued go nowhere while the breaker is open: SIGTERM ends the server at once.
  const t0 = Date.now();
  assert.equal((await s.stop()).code, 0, s.stderr());
  assert.ok(Date.now() - t0 < 10000, `shutdown took ${Date.now() - t0} ms`);
});

test('--cache-redis-deadline outside 1..60000 ms is refused', () => {
  for (const v of ['0', '-5', '60001']) {
    const r = spawnSync(BIN, ['serve', '-m', MODEL_PATH, '--port', '0', '--cache-redis', 'redis://127.0.0.1:1',
      '--cache-redis-deadline', v], { encoding: 'utf8', timeout: 20000 });
    assert.equal(r.status, 1, `${v}: ${r.stderr}`);
    assert.match(r.stderr, /--cache-redis-deadline must be between 1 and 60000 ms/);
  }
});

test('--cache-redis-readers outside 1..32 is refused', () => {
  for (const v of ['0', '-1', '33']) {
    const r = spawnSync(BIN, ['serve', '-m', MODEL_PATH, '--port', '0', '--cache-redis', 'redis://127.0.0.1:1',
      '--cache-redis-readers', v], { encoding: 'utf8', timeout: 20000 });
    assert.equal(r.status, 1, `${v}: ${r.stderr}`);
    assert.match(r.stderr, /--cache-redis-readers must be between 1 and 32/);
    assert.equal(r.stderr.trim().split('\n').length, 1, r.stderr);
  }
});
