// Issue 28's hostile requests, against the real server: deeply nested JSON (schemas, tool
// parameters), grammars whose nested repeats held the engine thread for a minute or more, and a
// PML union of 150,000 members. Each gets its answer (a 400 naming the problem, or a 200) and an
// unrelated request sent at the same time is served. The time bounds are liveness checks, far
// above what the fixed server takes and far below what the old one did (55 s to minutes).
import { test, before } from 'node:test';
import assert from 'node:assert/strict';
import { startServer, MODEL } from './server.mjs';

let server;
before(async () => {
  server = await startServer(['-c', '256', '--parallel', '2']);
});

const LIVENESS_MS = 10000;

function nested(open, close, n, leaf = '{}') {
  return open.repeat(n) + leaf + close.repeat(n);
}

function chatBody(extra) {
  return `{"model": "${MODEL}", "max_tokens": 1, "messages": [{"role": "user", "content": "hi"}]${extra}}`;
}

function schemaField(schema) {
  return `, "response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": ${schema}}}`;
}

// Sends `request` and, while it runs, an unrelated completion to server `on`; both must answer
// within `ms`.
async function withBystander(request, ms = LIVENESS_MS, on = server) {
  const start = Date.now();
  const bystander = on
    .json('POST', '/v1/completions', { model: MODEL, prompt: 'Once upon a time', max_tokens: 4 })
    .then((r) => ({ r, ms: Date.now() - start }));
  const main = request().then((r) => ({ r, ms: Date.now() - start }));
  const [m, b] = await Promise.all([main, bystander]);
  assert.equal(b.r.status, 200, b.r.text);
  assert.ok(b.ms < ms, `the unrelated request took ${b.ms} ms`);
  assert.ok(m.ms < ms, `the hostile request took ${m.ms} ms`);
  assert.ok(on.alive());
  return m.r;
}

function assert400(r, mentions, param) {
  assert.equal(r.status, 400, r.text);
  const e = r.body.error;
  assert.ok(!e.message.includes('\n'), e.message);
  for (const m of mentions) assert.ok(e.message.includes(m), `"${e.message}" mentions "${m}"`);
  if (param !== undefined) assert.equal(e.param, param, r.text);
}

test('deeply nested JSON schemas and tool parameters are prompt 400s, not crashes', async () => {
  const deep = 'nests arrays and objects deeper than 256 levels';
  const bodies = [
    chatBody(schemaField(nested('{"items": ', '}', 100000))),
    chatBody(schemaField(nested('{"type": "object", "properties": {"a": ', '}}', 50000))),
    chatBody(`, "tools": [{"type": "function", "function": {"name": "f", "parameters": ${
      nested('{"type": "array", "items": ', '}', 60000)}}}]`),
    // 10,000 nested properties took 46-64 s to reach their 400.
    chatBody(schemaField(nested('{"type": "object", "properties": {"a": ', '}}', 10000))),
  ];
  for (const body of bodies) {
    const r = await withBystander(() => server.json('POST', '/v1/chat/completions', body));
    assert400(r, [deep]);
  }
  // Within the JSON bound, past the schema bound: the compiler names where.
  const r = await withBystander(() =>
    server.json('POST', '/v1/chat/completions', chatBody(schemaField(nested('{"items": ', '}', 100)))));
  assert400(r, ['more than 64 schemas deep', 'items.items'], 'response_format.json_schema.schema');
});

test("the issue's 36-byte grammar is answered at once; nested {0,1000} is a 400 naming the rule", async () => {
  const grammar = (n) => `root ::= ((("a"{0,${n}}){0,${n}}){0,${n}})`;
  for (const n of [8, 10]) {
    const r = await withBystander(() =>
      server.json('POST', '/v1/completions', { model: MODEL, prompt: 'x', max_tokens: 1, grammar: grammar(n) }));
    assert.equal(r.status, 200, r.text);
    assert.match(r.body.choices[0].text, /^a*$/);
  }
  const r = await withBystander(() =>
    server.json('POST', '/v1/completions', { model: MODEL, prompt: 'x', max_tokens: 1, grammar: grammar(1000) }));
  assert400(r, ["rule 'root'", 'more than the limit of 4096'], 'grammar');
});

test('a grammar whose ambiguity grows with the text ends its request with an error', async () => {
  // Only a's may come for a while, and after n of them the recognizer holds about 2^n stacks.
  const grammar = 'root ::= x\nx ::= "a" x "b" | "a" x "c" | "a"{40}';
  const r = await withBystander(() =>
    server.json('POST', '/v1/completions', { model: MODEL, prompt: 'x', max_tokens: 60, grammar }));
  assert400(r, ['too ambiguous']);
});

// Text between sibling modules makes each attend to all of it before it, and text between one
// module's parameters makes each piece attend to the ones before it: the work and the reply grew
// as the square of those pieces (1,600 siblings, a 53 KB schema: 14 s and a 69 MB reply; 5,000
// parameters, 189 KB: 75 s). A 400 now, naming the bound, while another request is served.
test('a PML schema whose attention grows as the square of its pieces is a 400', async () => {
  const wide = await startServer(['-c', '16384', '--allow-long-context']);
  let siblings = '<schema name="siblings"><module name="p">';
  for (let i = 0; i < 1000; i++) siblings += `t <module name="c${i}">x</module> `;
  siblings += '</module></schema>';
  let params = '<schema name="params"><module name="m">';
  for (let i = 0; i < 2000; i++) params += `t <parameter name="a${i}" length="1"/>`;
  params += '</module></schema>';
  for (const xml of [siblings, params]) {
    const r = await withBystander(() => wide.json('POST', '/v1/schemas', xml), LIVENESS_MS, wide);
    assert400(r, ['the text pieces attend to more than 524288 earlier pieces', 'passes it'], 'schema');
  }
  // Below the bound, such a schema registers.
  const fewer = siblings.replace(/t <module name="c(\d+)">x<\/module> /g, (m, i) => (Number(i) < 300 ? m : ''));
  const ok = await wide.json('POST', '/v1/schemas', fewer);
  assert.equal(ok.status, 200, ok.text.slice(0, 300));
  assert.equal(ok.body.module_count, 301);
  assert.ok(wide.alive());
});

test('a PML union of 150,000 members registers; 100,000 nested modules are a 400', async () => {
  let xml = '<schema name="big"><union>';
  for (let i = 0; i < 150000; i++) xml += `<module name="m${i}">x</module>\n`;
  xml += '</union></schema>';
  // Registration took 67 s (the layout's text was built in n^2); 45 s is a liveness bound. Its
  // answer is 61 MB (1.2 MB gzip-compressed): under load Node took over 2 s to read it, and the
  // server's old 2 s keep-alive timeout then closed the connection under it (see
  // http_framing.test.mjs).
  const r = await withBystander(() => server.json('POST', '/v1/schemas', xml), 45000);
  assert.equal(r.status, 200, r.text.slice(0, 300));
  assert.equal(r.body.module_count, 150000);
  let deep = '<schema name="deep">';
  for (let i = 0; i < 100000; i++) deep += `<module name="n${i}">`;
  deep += '</module>'.repeat(100000) + '</schema>';
  const d = await withBystander(() => server.json('POST', '/v1/schemas', deep));
  assert400(d, ['nested deeper than 64 levels']);
});
