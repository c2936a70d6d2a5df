// Strict HTTP/1.1 framing (RFC 9112), over raw sockets: every request whose length a proxy in
// front could read differently from the server is refused with one error and its connection
// closed, so that no part of its body is ever served as a request of its own ("smuggling"); a
// body declared over --max-body-bytes is refused at once, before it is sent; valid chunked
// bodies, pipelining and keep-alive go on working. (src/server/http_framing_test.cc checks the
// parser itself case by case.)
import { test, before } from 'node:test';
import assert from 'node:assert/strict';
import net from 'node:net';
import { STATUS_CODES } from 'node:http';
import { startServer, MODEL } from './server.mjs';

let server;
before(async () => {
  server = await startServer(['--max-body-bytes', '65536']);
});

// Sends `text` (a string, or several written `gapMs` apart) on a fresh connection and collects
// what comes back until the server closes the connection or `timeoutMs` passes. `statuses`: the
// status of each response, in order; `ended`: the server closed the connection; `firstMs`: time
// from the first write to the first byte of the answer.
function exchange(text, { gapMs = 0, timeoutMs = 5000 } = {}) {
  const { hostname, port } = new URL(server.url);
  const parts = Array.isArray(text) ? text : [text];
  return new Promise((resolve) => {
    let data = '';
    let ended = false;
    let error = null;
    let t0 = 0;
    let firstMs = -1;
    const sock = net.connect(Number(port), hostname, async () => {
      t0 = Date.now();
      for (const p of parts) {
        if (sock.destroyed) break;
        sock.write(p);
        if (gapMs) await new Promise((r) => setTimeout(r, gapMs));
      }
    });
    sock.setEncoding('latin1');
    sock.on('data', (d) => {
      if (firstMs < 0) firstMs = Date.now() - t0;
      data += d;
    });
    sock.on('end', () => {
      ended = true;
      sock.end();
    });
    sock.on('error', (e) => { error = e; });
    const timer = setTimeout(() => sock.destroy(), timeoutMs);
    sock.on('close', () => {
      clearTimeout(timer);
      const responses = parseResponses(data);
      resolve({ data, responses, statuses: responses.map((x) => x.status), ended, error, firstMs });
    });
  });
}

// The responses in `data`, one after the other: { status, reason, headers (lower-case names), body }. A
// last one cut short is still listed; bytes that are no response are an error.
function parseResponses(data) {
  const out = [];
  let at = 0;
  while (at < data.length) {
    const m = /^HTTP\/1\.1 (\d{3}) ([^\r\n]*)\r\n/.exec(data.slice(at));
    assert.ok(m, `a response at byte ${at}: ${JSON.stringify(data.slice(at, at + 80))}`);
    const end = data.indexOf('\r\n\r\n', at);
    const headers = {};
    for (const line of data.slice(at + m[0].length, end).split('\r\n').filter(Boolean)) {
      const i = line.indexOf(':');
      headers[line.slice(0, i).toLowerCase()] = line.slice(i + 1).trim();
    }
    let body = '';
    at = end < 0 ? data.length : end + 4;
    if (headers['transfer-encoding'] === 'chunked') {
      for (;;) {
        const eol = data.indexOf('\r\n', at);
        const size = parseInt(data.slice(at, eol), 16);
        if (eol < 0 || Number.isNaN(size)) { at = data.length; break; }
        body += data.slice(eol + 2, eol + 2 + size);
        at = eol + 2 + size + 2;
        if (size === 0) break;
      }
    } else {
      const n = Number(headers['content-length'] ?? 0);
      body = data.slice(at, at + n);
      at += n;
    }
    out.push({ status: Number(m[1]), reason: m[2], headers, body });
  }
  return out;
}

const HEAD = 'Host: x\r\nContent-Type: application/json\r\n';
// A request that, if it were ever served, answers with the model list: what a smuggled request
// would look like.
const SMUGGLED = 'GET /v1/models HTTP/1.1\r\nHost: x\r\n\r\n';

// One refusal with `status`, the connection closed by the server, nothing served after it.
function assertRefused(r, status, mentions) {
  assert.deepEqual(r.statuses, [status], r.data);
  // The status line's reason phrase, as Node's own table spells it.
  assert.equal(r.responses[0].reason, STATUS_CODES[status]);
  assert.ok(r.ended, `the server closes the connection: ${r.data}`);
  assert.equal(r.error, null);
  assert.equal(r.responses[0].headers.connection, 'close');
  assert.ok(!r.data.includes(`"id":"${MODEL}"`), `the smuggled request was served: ${r.data}`);
  const body = JSON.parse(r.responses[0].body);
  assert.equal(typeof body.error.message, 'string');
  if (mentions) assert.match(body.error.message, mentions);
}

test('a Content-Length that is not all digits is a 400, and its body is not served as a request', async () => {
  for (const value of ['abc', '+51', '-5', '0x25', '5 5', '']) {
    const r = await exchange(`POST /v1/completions HTTP/1.1\r\n${HEAD}Content-Length: ${value}\r\n\r\n${SMUGGLED}`);
    assertRefused(r, 400, /Content-Length/);
  }
});

test('Content-Length with Transfer-Encoding, differing lengths and other codings are 400s (501 for an unknown coding)', async () => {
  const chunked = `0\r\n\r\n${SMUGGLED}`;
  const cases = [
    [`Content-Length: ${chunked.length - SMUGGLED.length}\r\nTransfer-Encoding: chunked\r\n`, 400, /both Content-Length and Transfer-Encoding/],
    ['Transfer-Encoding: chunked\r\nContent-Length: 5\r\n', 400, /both/],
    ['Content-Length: 5\r\nContent-Length: 41\r\n', 400, /differing Content-Length/],
    ['Transfer-Encoding: gzip\r\n', 400, /does not end with chunked/],
    ['Transfer-Encoding: chunked, identity\r\n', 400, /does not end with chunked/],
    ['Transfer-Encoding: gzip, chunked\r\n', 501, /not supported/],
    ['Transfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n', 400, /single 'chunked'/],
    // A bare LF: a lenient proxy sees a Transfer-Encoding header that cpp-httplib skips.
    ['X-A: 1\nTransfer-Encoding: chunked\r\n', 400, /bare CR or LF/],
    ['Transfer-Encoding : chunked\r\n', 400, /no whitespace before the colon/],
    ['X-A: 1\r\n Transfer-Encoding: chunked\r\n', 400, /folded/],
  ];
  for (const [fields, status, mentions] of cases) {
    const r = await exchange(`POST /v1/completions HTTP/1.1\r\n${HEAD}${fields}\r\n${chunked}`);
    assertRefused(r, status, mentions);
  }
});

test('a chunked body whose sizes are not plain hex is a 400 and ends the connection', async () => {
  for (const body of [`0x5\r\nhello\r\n0\r\n\r\n`, `+5\r\nhello\r\n0\r\n\r\n`, `5 junk\r\nhello\r\n0\r\n\r\n`,
                      `5\r\nhelloX\r\n0\r\n\r\n`]) {
    const r = await exchange(`POST /v1/completions HTTP/1.1\r\n${HEAD}Transfer-Encoding: chunked\r\n\r\n${body}${SMUGGLED}`);
    assertRefused(r, 400, /malformed chunked body/);
  }
});

test('a declared body over --max-body-bytes is a 413 at once, before any of it is sent', async () => {
  // 1 GB declared and never sent: the answer must not wait for it (it took the body deadline,
  // 60 s, when the library skipped the body first).
  const r = await exchange(`POST /v1/completions HTTP/1.1\r\n${HEAD}Content-Length: 1000000000\r\n\r\n{"model":`);
  assertRefused(r, 413);
  assert.match(r.data, /"code":"request_too_large"/);
  assert.ok(r.firstMs >= 0 && r.firstMs < 1000, `the 413 came after ${r.firstMs} ms`);
  // Anthropic's route answers in its own shape.
  const m = await exchange(`POST /v1/messages HTTP/1.1\r\n${HEAD}Content-Length: 99999999999999999999999\r\n\r\n`);
  assertRefused(m, 413);
  assert.match(m.data, /"type":"error"/);
});

test('malformed request lines get one 400 and the connection is closed', async () => {
  const garbage = 'hello there\r\n\r\nmore garbage\r\n\r\nGET /health HTTP/1.1\r\nHost: x\r\n\r\n';
  assertRefused(await exchange(garbage), 400, /malformed request line/);
  // Line by line, as a client typing garbage would send it: still one 400.
  assertRefused(await exchange(['hello\r\n', '\r\n', 'again\r\n', '\r\n'], { gapMs: 50 }), 400);
  assertRefused(await exchange('GET / HTTP/2.0\r\nHost: x\r\n\r\n'), 505);
  assertRefused(await exchange('GET /health HTTP/1.1\r\n\r\n'), 400, /Host/);
  assertRefused(await exchange(`GET /${'a'.repeat(9000)} HTTP/1.1\r\nHost: x\r\n\r\n`), 414);
  assertRefused(await exchange(`GET /health HTTP/1.1\r\nHost: x\r\nX-Big: ${'a'.repeat(9000)}\r\n\r\n`), 431);
  // A head that never ends is cut at 64 KiB, not read forever.
  const endless = await exchange(`GET /health HTTP/1.1\r\nHost: x\r\n${'X-A: b\r\n'.repeat(10000)}`);
  assertRefused(endless, 431);
});

test('a body the route does not read (GET with a Content-Length) closes the connection after the answer', async () => {
  const body = SMUGGLED;
  const r = await exchange(`GET /health HTTP/1.1\r\nHost: x\r\nContent-Length: ${body.length}\r\n\r\n${body}`);
  assert.deepEqual(r.statuses, [200], r.data);
  assert.ok(r.ended);
  assert.equal(r.responses[0].headers.connection, 'close');
  assert.equal(r.responses[0].headers['keep-alive'], undefined, r.data);
  assert.ok(!r.data.includes(`"id":"${MODEL}"`), r.data);
});

test('valid chunked bodies, Content-Length bodies and pipelined requests keep the connection', async () => {
  const json = JSON.stringify({ prompt: 'Once upon a time' });
  // Two chunks, one with an extension; an empty line before the first request is skipped.
  const chunked = `${(json.length - 5).toString(16)}\r\n${json.slice(0, -5)}\r\n5;note=1\r\n${json.slice(-5)}\r\n0\r\n\r\n`;
  const r = await exchange([
    `\r\nPOST /tokenize HTTP/1.1\r\n${HEAD}Transfer-Encoding: chunked\r\n\r\n${chunked}`,
    `POST /tokenize HTTP/1.1\r\n${HEAD}Content-Length: ${json.length}\r\n\r\n${json}`,
    // Two at once (pipelined), the second closing the connection.
    `GET /health HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n` +
    `POST /tokenize HTTP/1.1\r\n${HEAD}Content-Length: ${json.length}\r\nConnection: close\r\n\r\n${json}`,
  ], { gapMs: 20 });
  assert.deepEqual(r.statuses, [200, 200, 200, 200], r.data);
  assert.ok(r.ended);
  const tokens = r.responses.filter((x) => x.body.startsWith('{"tokens"')).map((x) => x.body);
  assert.equal(tokens.length, 3, r.data);
  assert.equal(new Set(tokens).size, 1, 'the chunked body was read whole');
  assert.ok(JSON.parse(tokens[0]).tokens.length > 2, tokens[0]);
  // Trailer fields are framed correctly but cpp-httplib refuses them: a 400, then closed.
  const t = await exchange(`POST /tokenize HTTP/1.1\r\n${HEAD}Transfer-Encoding: chunked\r\n\r\n` +
    `${json.length.toString(16)}\r\n${json}\r\n0\r\nX-Trailer: 1\r\n\r\n${SMUGGLED}`);
  assert.deepEqual(t.statuses, [400], t.data);
  assert.ok(t.ended);
  // The refusals are counted, and the server still serves.
  const ok = await server.json('POST', '/tokenize', { prompt: 'Hi' });
  assert.equal(ok.status, 200);
  const m = await server.metrics();
  assert.ok(m['promptcache_http_responses_total{code="400"}'] >= 20, JSON.stringify(m));
  assert.ok(m['promptcache_http_responses_total{code="413"}'] >= 2, JSON.stringify(m));
});

test('a kept-alive connection outlasts a client that reads its response seconds later', async () => {
  // Node's fetch (undici) fails a request whose response has arrived but that the caller has not
  // read yet when the server closes the idle connection ("terminated: other side closed"). A
  // 4 MB answer, gzip-compressed as fetch asks by default, read 3 s later: the old 2 s idle
  // timeout failed this every time. The default (5 s) is what Keep-Alive announces; the flag
  // changes it.
  const plain = await startServer();
  let xml = '<schema name="wide"><union>';
  for (let i = 0; i < 10000; i++) xml += `<module name="m${i}">x</module>\n`;
  xml += '</union></schema>';
  const res = await fetch(`${plain.url}/v1/schemas`, { method: 'POST', body: xml });
  await new Promise((r) => setTimeout(r, 3000));
  const body = JSON.parse(await res.text());
  assert.equal(res.status, 200);
  assert.equal(body.module_count, 10000);
  assert.equal(res.headers.get('content-encoding'), 'gzip');
  assert.match(res.headers.get('keep-alive'), /^timeout=5\b/);
  const longer = await startServer(['--idle-timeout', '12']);
  const h = await fetch(`${longer.url}/health`);
  await h.text();
  assert.match(h.headers.get('keep-alive'), /^timeout=12\b/);
});
