// Starts the real `promptcache serve` on a loopback port for the integration tests and stops it
// afterwards, also when a test fails. The binary and the shared folder come from the
// environment that tests/CMakeLists.txt sets: PROMPTCACHE_BIN and PC_SHARED_DIR.
import { spawn } from 'node:child_process';
import { after } from 'node:test';
import path from 'node:path';
import OpenAI from 'openai';

export const BIN = process.env.PROMPTCACHE_BIN;
export const SHARED = process.env.PC_SHARED_DIR;
if (!BIN || !SHARED) {
  throw new Error('set PROMPTCACHE_BIN and PC_SHARED_DIR (ctest does: see tests/CMakeLists.txt)');
}
export const MODEL_PATH = path.join(SHARED, 'models', 'stories260K.gguf');
export const MODEL = 'stories260K';
export const BLOCK = 16;

// Every server this test file started; stopped by the file's root `after` hook (a hook
// registered inside `before` would run as soon as `before` ends), and killed on any exit.
const running = new Set();
const servers = new Set();
after(() => Promise.all([...servers].map((s) => s.stop())));
process.on('exit', () => {
  for (const child of running) child.kill('SIGKILL');
});

// Resolves with the server once it prints "listening on http://HOST:PORT" (port 0: it picks).
// `model`: another GGUF file to serve instead of stories260K.
export async function startServer(extraArgs = [], { timeoutMs = 20000, model = MODEL_PATH } = {}) {
  const args = ['serve', '-m', model, '--port', '0', '-t', '1', ...extraArgs];
  const child = spawn(BIN, args, { stdio: ['ignore', 'ignore', 'pipe'] });
  running.add(child);
  let stderr = '';
  const url = await new Promise((resolve, reject) => {
    const timer = setTimeout(() => {
      child.kill('SIGKILL');
      reject(new Error(`server did not start in ${timeoutMs} ms; stderr:\n${stderr}`));
    }, timeoutMs);
    child.stderr.on('data', (d) => {
      stderr += d.toString();
      const m = stderr.match(/listening on (http:\/\/\S+)/);
      if (m) {
        clearTimeout(timer);
        resolve(m[1]);
      }
    });
    child.on('exit', (code, signal) => {
      clearTimeout(timer);
      reject(new Error(`server exited (${code ?? signal}) before listening; stderr:\n${stderr}`));
    });
  });
  child.removeAllListeners('exit');
  const exited = new Promise((resolve) => child.on('exit', (code, signal) => resolve({ code, signal })));
  const server = {
    url,
    child,
    stderr: () => stderr,
    // SIGTERM, then SIGKILL if it has not exited within the grace period.
    async stop(graceMs = 15000) {
      if (child.exitCode !== null || child.signalCode !== null) return exited;
      child.kill('SIGTERM');
      const timer = setTimeout(() => child.kill('SIGKILL'), graceMs);
      const result = await exited;
      clearTimeout(timer);
      running.delete(child);
      return result;
    },
    alive: () => child.exitCode === null && child.signalCode === null,
    client(options = {}) {
      return new OpenAI({ baseURL: `${url}/v1`, apiKey: 'unused', maxRetries: 0, timeout: 60000, ...options });
    },
    async json(method, route, body, headers = {}) {
      const res = await fetch(url + route, {
        method,
        headers: { 'content-type': 'application/json', ...headers },
        body: body === undefined ? undefined : typeof body === 'string' || body instanceof Uint8Array ? body : JSON.stringify(body),
      });
      const text = await res.text();
      let parsed = null;
      try {
        parsed = JSON.parse(text);
      } catch {}
      return { status: res.status, body: parsed, text, headers: res.headers };
    },
    async tokenize(body) {
      const r = await server.json('POST', '/tokenize', body);
      if (r.status !== 200) throw new Error(`/tokenize: ${r.status} ${r.text}`);
      return r.body.tokens;
    },
    async metrics() {
      const res = await fetch(url + '/metrics');
      return parseMetrics(await res.text());
    },
  };
  servers.add(server);
  return server;
}

// Prometheus text -> { 'name{labels}': number }.
export function parseMetrics(text) {
  const out = {};
  for (const line of text.split('\n')) {
    if (!line || line.startsWith('#')) continue;
    const i = line.lastIndexOf(' ');
    out[line.slice(0, i)] = Number(line.slice(i + 1));
  }
  return out;
}

export function commonPrefix(a, b) {
  let n = 0;
  while (n < a.length && n < b.length && a[n] === b[n]) n++;
  return n;
}

// What the engine reuses: whole blocks of the shared prefix, never the prompt's last token.
export function expectedCached(shared, promptLength) {
  return Math.floor(Math.min(shared, promptLength - 1) / BLOCK) * BLOCK;
}

export async function waitFor(predicate, { timeoutMs = 5000, stepMs = 50 } = {}) {
  const end = Date.now() + timeoutMs;
  for (;;) {
    if (await predicate()) return true;
    if (Date.now() > end) return false;
    await new Promise((r) => setTimeout(r, stepMs));
  }
}

// A long shared prefix for stories260K (about 300 tokens).
export const STORY =
  'Once upon a time, there was a little girl named Lily. She loved to play outside in the park. ' +
  'One day, she saw a big, red ball. She wanted to play with it, but it was too high. ' +
  "Lily's mom said, \"Lily, let's go to the park.\" Lily was so happy. She ran to the swings and " +
  'the slide. Then she saw a dog. The dog was brown and had a long tail. Lily said hello to the ' +
  'dog and the dog wagged its tail. They played together all day. When the sun went down, Lily ' +
  'went home with her mom. She ate her dinner and went to bed. She dreamed about the dog and the ' +
  'big red ball. The next morning, Lily woke up early. She put on her shoes and ran outside. ' +
  'The sky was blue and the birds were singing. Lily smiled and said, "Today is a good day."';
