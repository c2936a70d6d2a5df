// A real redis-server for the integration tests: started on a free loopback port in a temp folder
// of its own, without persistence, and killed when the test file ends. A missing redis-server
// fails the test (scripts/setup.sh installs it), never skips it. `command` speaks RESP over a raw
// socket, so a test can read and overwrite values byte for byte.
import { spawn } from 'node:child_process';
import { after } from 'node:test';
import fs from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';

const started = new Set();
after(() => Promise.all([...started].map((r) => r.stop())));
process.on('exit', () => {
  for (const r of started) r.child?.kill('SIGKILL');
});

export async function freePort() {
  return new Promise((resolve, reject) => {
    const srv = net.createServer();
    srv.on('error', reject);
    srv.listen(0, '127.0.0.1', () => {
      const { port } = srv.address();
      srv.close(() => resolve(port));
    });
  });
}

// One RESP command; resolves with the reply (string/Buffer/number/array/null) or rejects on an
// error reply or a connection failure.
export function command(port, ...args) {
  return new Promise((resolve, reject) => {
    const sock = net.connect(port, '127.0.0.1');
    const parts = [Buffer.from(`*${args.length}\r\n`)];
    for (const a of args) {
      const b = Buffer.isBuffer(a) ? a : Buffer.from(String(a));
      parts.push(Buffer.from(`$${b.length}\r\n`), b, Buffer.from('\r\n'));
    }
    let buf = Buffer.alloc(0);
    sock.on('connect', () => sock.write(Buffer.concat(parts)));
    sock.on('data', (d) => {
      buf = Buffer.concat([buf, d]);
      const r = parse(buf, 0);
      if (r) {
        sock.destroy();
        if (r.value instanceof Error) reject(r.value);
        else resolve(r.value);
      }
    });
    sock.on('error', reject);
  });
}

// { value, end } for the reply starting at `at`, or null if `buf` does not hold all of it yet.
function parse(buf, at) {
  const eol = buf.indexOf('\r\n', at);
  if (eol < 0) return null;
  const type = String.fromCharCode(buf[at]);
  const line = buf.subarray(at + 1, eol).toString();
  if (type === '+') return { value: line, end: eol + 2 };
  if (type === '-') return { value: new Error(line), end: eol + 2 };
  if (type === ':') return { value: Number(line), end: eol + 2 };
  if (type === '$') {
    const n = Number(line);
    if (n < 0) return { value: null, end: eol + 2 };
    if (buf.length < eol + 2 + n + 2) return null;
    return { value: buf.subarray(eol + 2, eol + 2 + n), end: eol + 2 + n + 2 };
  }
  if (type === '*') {
    const n = Number(line);
    const out = [];
    let pos = eol + 2;
    for (let i = 0; i < n; i++) {
      const r = parse(buf, pos);
      if (!r) return null;
      out.push(r.value);
      pos = r.end;
    }
    return { value: out, end: pos };
  }
  throw new Error(`unexpected RESP reply type '${type}'`);
}

// Starts redis-server (on `port`, or a free one) and resolves once it answers PING.
export async function startRedis({ port } = {}) {
  port ??= await freePort();
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'promptcache-redis-'));
  const r = { port, url: `redis://127.0.0.1:${port}`, child: null };
  const launch = () => {
    const child = spawn('redis-server', ['--port', String(port), '--bind', '127.0.0.1', '--save', '',
      '--appendonly', 'no', '--dir', dir, '--maxmemory-policy', 'allkeys-lru',
      '--enable-debug-command', 'local'], { stdio: 'ignore' });
    r.child = child;
    r.failed = null;
    child.on('error', (e) => { r.failed = e; });
  };
  r.stop = async () => {
    const child = r.child;
    if (!child || child.exitCode !== null || child.signalCode !== null) return;
    const gone = new Promise((res) => child.on('exit', res));
    child.kill('SIGKILL');
    await gone;
  };
  r.restart = async () => {
    launch();
    await ready(r);
  };
  r.cleanup = () => fs.rmSync(dir, { recursive: true, force: true });
  started.add(r);
  launch();
  await ready(r);
  return r;
}

async function ready(r) {
  const end = Date.now() + 10000;
  for (;;) {
    if (r.failed) {
      throw new Error(`cannot start redis-server (${r.failed.message}): run scripts/setup.sh`);
    }
    try {
      if ((await command(r.port, 'PING')) === 'PONG') return;
    } catch {}
    if (Date.now() > end) throw new Error('redis-server did not answer PING within 10 s');
    await new Promise((res) => setTimeout(res, 50));
  }
}
