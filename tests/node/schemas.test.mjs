// The modular prompt cache through the server: the schema endpoints (plain fetch), PML prompts
// through the OpenAI client's completions, the chat extension's schema/modules fields, every
// kind of PML error as a 4xx, and schemas that come back after a restart with --cache-dir.
// Uses examples/story (docs/modules.md walks through it) and a small schema written here.
import { test, before } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import OpenAI from 'openai';
import { startServer, MODEL } from './server.mjs';

const EXAMPLES = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../../examples/story');
const STORY_XML = fs.readFileSync(path.join(EXAMPLES, 'story.xml'), 'utf8');
const LILY_XML = fs.readFileSync(path.join(EXAMPLES, 'lily.xml'), 'utf8');  // lily, park, find=" big box"
const TIM_XML = fs.readFileSync(path.join(EXAMPLES, 'tim.xml'), 'utf8');
const SUE_XML = fs.readFileSync(path.join(EXAMPLES, 'sue.xml'), 'utf8');

// For requires/excludes/parameter errors (stories260K has no chat template: plain "User: ").
const SUPPORT_XML = `<schema name="support"> Once upon a time, there was a shop.
  <module name="tone"><![CDATA[ The shop was quiet.]]></module>
  <module name="greeting"><![CDATA[ Hello,]]><parameter name="name" length="4" scaffold=" friend"/><![CDATA[!]]></module>
  <module name="ticket" requires="greeting" excludes="tone"><![CDATA[ Ticket]]><parameter name="id" length="4"/></module>
</schema>`;

const greedy = { model: MODEL, max_tokens: 24, temperature: 0, ignore_eos: true };

async function loadSchema(server, body, { json = false } = {}) {
  const r = await server.json('POST', '/v1/schemas', json ? { schema: body } : body,
                              json ? {} : { 'content-type': 'application/xml' });
  assert.equal(r.status, 200, r.text);
  return r.body;
}

function assertError(r, status, { param, mentions = [] } = {}) {
  assert.equal(r.status, status, r.text);
  const e = r.body?.error;
  assert.ok(e && typeof e.message === 'string' && e.message.length > 0, r.text);
  assert.ok(!e.message.includes('\n'), 'a one-line message');
  if (param !== undefined) assert.equal(e.param, param, r.text);
  for (const m of mentions) assert.ok(e.message.includes(m), `"${e.message}" mentions "${m}"`);
}

let server, client;
before(async () => {
  server = await startServer(['--parallel', '4']);
  client = server.client();
  await loadSchema(server, STORY_XML);
  await loadSchema(server, SUPPORT_XML, { json: true });
});

test('POST /v1/schemas returns the layout; GET lists and describes schemas', async () => {
  // Loading it again finds every module cached: nothing is encoded twice.
  const s = await loadSchema(server, STORY_XML);
  assert.equal(s.object, 'schema');
  assert.equal(s.name, 'story');
  assert.equal(s.total_length, 408);  // docs/modules.md
  assert.equal(s.module_count, 10);
  assert.equal(s.cached_modules, 9);
  assert.equal(s.cached_tokens, 593);
  assert.equal(s.load.encoded_tokens, 0);
  assert.equal(s.load.reused_tokens, 593);
  assert.equal(s.persisted, false, 'no --cache-dir');
  assert.deepEqual(s.always, { tokens: 35, ranges: [{ start: 0, end: 35 }] });
  const mod = (name) => s.modules.find((m) => m.name === name);
  assert.deepEqual([mod('lily').start, mod('lily').end, mod('lily').tokens], [35, 118, 83]);
  assert.equal(mod('tim').start, 35, 'union members share their start');
  assert.equal(mod('lily').union_default, true);
  assert.deepEqual([mod('weather').start, mod('weather').length, mod('weather').tokens], [124, 48, 36]);
  assert.equal(mod('moral').cached, false);
  assert.deepEqual(mod('find').parameters, [{ name: 'thing', start: 350, length: 10, default: ' shiny stone' }]);
  assert.deepEqual(mod('answer').attends_to.map((a) => a.module), [null, 'ask']);
  assert.deepEqual(s.unions.map((u) => u.default), ['lily', 'park']);
  assert.ok(s.layout.includes('total length 408'), s.layout);

  const list = await server.json('GET', '/v1/schemas');
  assert.equal(list.status, 200);
  assert.deepEqual(list.body.data.map((d) => d.name).sort(), ['story', 'support']);
  const one = await server.json('GET', '/v1/schemas/support');
  assert.equal(one.status, 200, one.text);
  assert.deepEqual(one.body.modules.find((m) => m.name === 'ticket').requires, ['greeting']);
  assertError(await server.json('GET', '/v1/schemas/nothing'), 404, { mentions: ['nothing'] });
});

test('a PML prompt through client.completions.create reports reused module tokens', async () => {
  const r = await client.completions.create({ ...greedy, prompt: LILY_XML });
  // docs/modules.md: 246 prompt tokens, 236 reused (always text, lily, park, find's text), 10
  // computed (the argument and the new text).
  assert.equal(r.usage.prompt_tokens, 246);
  assert.equal(r.usage.prompt_tokens_details.cached_tokens, 236);
  assert.equal(r.usage.completion_tokens, 24);
  assert.equal(r.timings.schema, 'story');
  assert.equal(r.timings.reused_tokens, 236);
  assert.equal(r.timings.computed_tokens, 10);
  assert.equal(r.timings.encoded_tokens, 0);
  for (const k of ['gather_ms', 'encode_ms', 'prefill_ms', 'ttft_ms']) assert.equal(typeof r.timings[k], 'number', k);
  assert.ok(r.choices[0].text.length > 0);

  // Streamed: the same text, timings on the finish chunk, usage at the end.
  const stream = await client.completions.create({ ...greedy, prompt: LILY_XML, stream: true, stream_options: { include_usage: true } });
  let text = '', timings = null, usage = null;
  for await (const chunk of stream) {
    for (const c of chunk.choices) text += c.text;
    if (chunk.timings) timings = chunk.timings;
    if (chunk.usage) usage = chunk.usage;
  }
  assert.equal(text, r.choices[0].text);
  assert.equal(timings.reused_tokens, 236);
  assert.equal(usage.prompt_tokens_details.cached_tokens, 236);

  // The JSON form of the same prompt is the same prompt.
  const j = await client.completions.create({
    ...greedy, schema: 'story', modules: ['lily', 'park', { name: 'find', args: { thing: ' big box' } }], prompt: '\nOne day,',
  });
  assert.equal(j.choices[0].text, r.choices[0].text);
  assert.deepEqual(j.usage, r.usage);

  // "pml": false sends the same text as a plain prompt.
  const plain = await client.completions.create({ ...greedy, prompt: LILY_XML, pml: false, max_tokens: 4 });
  assert.equal(plain.timings.schema, undefined);
});

test('chat with the schema extension: modules picked, messages as the new text', async () => {
  const r = await client.chat.completions.create({
    ...greedy, schema: 'story', modules: [{ name: 'tim' }, 'lake'],
    messages: [{ role: 'user', content: 'What did Tim bring?' }],
  });
  assert.equal(r.object, 'chat.completion');
  assert.equal(typeof r.choices[0].message.content, 'string');
  assert.equal(r.timings.schema, 'story');
  const s = (await server.json('GET', '/v1/schemas/story')).body;
  const tokens = (name) => s.modules.find((m) => m.name === name).tokens;
  // Reused: the always text, tim, lake and find's text (find is not picked: only what is).
  assert.equal(r.usage.prompt_tokens_details.cached_tokens, s.always.tokens + tokens('tim') + tokens('lake'));
  assert.equal(r.usage.prompt_tokens, r.usage.prompt_tokens_details.cached_tokens + r.timings.computed_tokens);

  // The same as the PML prompt with a <user> turn.
  const x = await client.completions.create({
    ...greedy, prompt: '<prompt schema="story"><tim/><lake/><user>What did Tim bring?</user></prompt>',
  });
  assert.equal(x.choices[0].text, r.choices[0].message.content);
  assert.equal(x.usage.prompt_tokens, r.usage.prompt_tokens);

  // Streamed through the client.
  const stream = await client.chat.completions.create({
    ...greedy, schema: 'story', modules: ['tim', 'lake'], messages: [{ role: 'user', content: 'What did Tim bring?' }], stream: true,
  });
  let text = '';
  for await (const chunk of stream) text += chunk.choices[0]?.delta?.content ?? '';
  assert.equal(text, r.choices[0].message.content);

  // Parameters: an argument and the scaffold default.
  const named = await client.chat.completions.create({
    ...greedy, max_tokens: 4, schema: 'support', modules: [{ name: 'greeting', args: { name: ' Ana' } }, { name: 'ticket', args: { id: ' 42' } }],
    messages: [{ role: 'user', content: 'Help' }],
  });
  assert.ok(named.usage.prompt_tokens_details.cached_tokens > 0);
});

test('PML errors are 400/404 with the engine\'s one-line message', async () => {
  const complete = (prompt, extra = {}) => server.json('POST', '/v1/completions', { ...greedy, prompt, ...extra });
  const chat = (extra) => server.json('POST', '/v1/chat/completions',
                                      { ...greedy, messages: [{ role: 'user', content: 'Hi' }], ...extra });
  assertError(await complete('<prompt schema="nope"><lily/></prompt>'), 404, { param: 'prompt', mentions: ["'nope'"] });
  assertError(await complete('<prompt schema="story"><dragon/></prompt>'), 404, { param: 'prompt', mentions: ["'dragon'"] });
  assertError(await complete('<prompt schema="story"><lily/><tim/></prompt>'), 400, { param: 'prompt', mentions: ['union'] });
  assertError(await complete('<prompt schema="story"><lily></prompt>'), 400, { param: 'prompt', mentions: ['malformed XML'] });
  assertError(await complete('<prompt schema="story"><find thing=" a very very long argument that does not fit at all"/></prompt>'),
              400, { param: 'prompt', mentions: ["'thing'"] });
  assertError(await complete('<prompt schema="support"><ticket id=" 1"/></prompt>'), 400, { mentions: ['requires', 'greeting'] });
  assertError(await complete('<prompt schema="support"><tone/><greeting/><ticket id=" 1"/></prompt>'), 400, { mentions: ['excludes'] });
  assertError(await complete('<prompt schema="support"><greeting/><ticket/></prompt>'), 400, { mentions: ["'id'"] });
  assertError(await complete('<prompt schema="story"><moral/></prompt>', { max_tokens: 1700 }), 400,
              { param: 'max_tokens', mentions: ['position 408'] });

  assertError(await chat({ schema: 'nope' }), 404, { param: 'schema', mentions: ["'nope'"] });
  assertError(await chat({ schema: 'story', modules: ['dragon'] }), 404, { param: 'modules', mentions: ["'dragon'"] });
  assertError(await chat({ schema: 'story', modules: ['lily', 'sue'] }), 400, { param: 'modules', mentions: ['union'] });
  assertError(await chat({ schema: 'story', modules: [{ name: 'lily', args: 'x' }] }), 400, { param: 'modules[0].args' });
  assertError(await chat({ modules: ['lily'] }), 400, { param: 'modules' });
  assertError(await chat({ schema: 'story', cache: { pin: true } }), 400, { param: 'cache' });

  // Through the client: typed errors.
  await assert.rejects(client.completions.create({ ...greedy, prompt: '<prompt schema="nope"/>' }),
                       (e) => e instanceof OpenAI.NotFoundError && e.status === 404);
  await assert.rejects(client.chat.completions.create({ ...greedy, schema: 'story', modules: ['lily', 'tim'], messages: [{ role: 'user', content: 'x' }] }),
                       (e) => e instanceof OpenAI.BadRequestError && /union/.test(e.message));

  // Bad schemas.
  const post = (body, headers = { 'content-type': 'application/xml' }) => server.json('POST', '/v1/schemas', body, headers);
  assertError(await post('<schema name="x"><module name="a">'), 400, { param: 'schema', mentions: ['malformed XML'] });
  assertError(await post('<schema name="x"><module name="a">1</module><module name="a">2</module></schema>'), 400,
              { mentions: ["'a'"] });
  assertError(await post('<schema name="x"><module name="a" src="/etc/passwd"/></schema>'), 400, { mentions: ['src'] });
  assertError(await post('<schema name="x"><module name="a" length="1">one two three four</module></schema>'), 400,
              { mentions: ['length'] });
  assertError(await post(''), 400);
  assertError(await post({ schema: 42 }, {}), 400, { param: 'schema' });
  assertError(await post('{"schema": '), 400);
  assertError(await server.json('PUT', '/v1/schemas/story', 'x'), 405);

  assert.ok(server.alive());
  assert.equal((await client.completions.create({ ...greedy, prompt: LILY_XML, max_tokens: 2 })).usage.prompt_tokens_details.cached_tokens, 236);
});

test('concurrent prompts share modules and answer as they do alone', async () => {
  const prompts = [LILY_XML, TIM_XML, SUE_XML, LILY_XML];
  const alone = [];
  for (const p of prompts) alone.push((await client.completions.create({ ...greedy, prompt: p })).choices[0].text);
  const together = await Promise.all(prompts.map((p) => client.completions.create({ ...greedy, prompt: p })));
  assert.deepEqual(together.map((r) => r.choices[0].text), alone);
  for (const r of together) assert.ok(r.usage.prompt_tokens_details.cached_tokens > 0);
});

test('"evaluate": true reports fidelity against the contiguous and the gapped recompute', async () => {
  const r = await server.json('POST', '/v1/completions', {
    model: MODEL, max_tokens: 8, temperature: 0, evaluate: true,
    prompt: '<prompt schema="story" positions="contiguous"><lily/><park/><![CDATA[\nOne day,]]></prompt>',
  });
  assert.equal(r.status, 200, r.text);
  for (const baseline of ['contiguous', 'gapped']) {
    const f = r.body.fidelity[baseline];
    assert.equal(f.steps, 8, r.text);
    assert.ok(f.top1_agreement >= 0 && f.top1_agreement <= 1, r.text);
    assert.ok(f.first_token_kl >= 0, r.text);
    assert.equal(typeof f.greedy_equal, 'boolean');
  }
  // Every module recomputed: the contiguous recompute is matched exactly.
  const exact = await server.json('POST', '/v1/completions', {
    model: MODEL, max_tokens: 8, temperature: 0, evaluate: true, recompute: 1,
    prompt: '<prompt schema="story" positions="contiguous"><lily/><park/><![CDATA[\nOne day,]]></prompt>',
  });
  assert.equal(exact.status, 200, exact.text);
  assert.equal(exact.body.fidelity.contiguous.first_token_kl, 0, exact.text);
  assert.equal(exact.body.fidelity.contiguous.greedy_equal, true, exact.text);
  assert.equal(exact.body.fidelity.contiguous.top1_agreement, 1, exact.text);
  const plain = await server.json('POST', '/v1/completions', { model: MODEL, prompt: 'Hi', evaluate: true });
  assert.equal(plain.status, 400);
  assert.equal(plain.body.error.param, 'evaluate');
});

test('DELETE /v1/schemas/{name} unregisters it', async () => {
  await loadSchema(server, '<schema name="scratch"> Once upon a time<module name="m"><![CDATA[ there was a cat.]]></module></schema>');
  const r = await client.completions.create({ ...greedy, max_tokens: 4, prompt: '<prompt schema="scratch"><m/> The cat</prompt>' });
  assert.ok(r.usage.prompt_tokens_details.cached_tokens > 0);
  const del = await server.json('DELETE', '/v1/schemas/scratch');
  assert.equal(del.status, 200, del.text);
  assert.deepEqual(del.body, { object: 'schema', name: 'scratch', deleted: true });
  assertError(await server.json('DELETE', '/v1/schemas/scratch'), 404);
  assertError(await server.json('GET', '/v1/schemas/scratch'), 404);
  assertError(await server.json('POST', '/v1/completions', { ...greedy, prompt: '<prompt schema="scratch"><m/></prompt>' }), 404);
  assert.ok(!(await server.json('GET', '/v1/schemas')).body.data.some((d) => d.name === 'scratch'));
});

test('schemas registered with --cache-dir come back after a restart, modules from disk', async (t) => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'promptcache-schemas-'));
  t.after(() => fs.rmSync(dir, { recursive: true, force: true }));

  const first = await startServer(['--cache-dir', dir]);
  const loaded = await loadSchema(first, STORY_XML);
  assert.equal(loaded.persisted, true);
  assert.equal(loaded.load.encoded_tokens, 593);
  // The router's view of a PML prompt: its cached pieces by tier, what the request then reuses.
  const lookup = async (server, prompt) => {
    const r = await server.json('POST', '/v1/cache/lookup', { prompt });
    assert.equal(r.status, 200, r.text);
    return r.body;
  };
  const inRam = await lookup(first, LILY_XML);
  assert.equal(inRam.modular, true);
  assert.deepEqual(inRam.tiers, { ram: inRam.cached_tokens, disk: 0, remote: 0 });
  const before = await first.client().completions.create({ ...greedy, prompt: LILY_XML });
  assert.equal(inRam.cached_tokens, before.usage.prompt_tokens_details.cached_tokens);
  assert.equal(inRam.prompt_tokens, before.usage.prompt_tokens);
  assertError(await first.json('POST', '/v1/cache/lookup', { prompt: '<prompt schema="nope"/>' }), 404,
              { param: 'prompt', mentions: ['nope'] });
  assert.equal((await first.stop()).code, 0, first.stderr());

  const second = await startServer(['--cache-dir', dir]);
  const list = (await second.json('GET', '/v1/schemas')).body.data;
  assert.deepEqual(list.map((d) => [d.name, d.persisted]), [['story', true]]);
  const back = (await second.json('GET', '/v1/schemas/story')).body;
  assert.equal(back.total_length, 408);
  assert.equal(back.load.encoded_tokens, 0, 'nothing re-encoded');
  assert.equal(back.load.reused_tokens, 593, 'every module found in the disk tier');
  assert.deepEqual((await lookup(second, LILY_XML)).tiers, { ram: 0, disk: 236, remote: 0 });
  const after = await second.client().completions.create({ ...greedy, prompt: LILY_XML });
  assert.equal(after.usage.prompt_tokens_details.cached_tokens, 236);
  assert.equal(after.timings.encoded_tokens, 0);
  assert.equal(after.choices[0].text, before.choices[0].text, 'the same output from disk-loaded modules');
  assert.ok((await second.metrics()).promptcache_cache_disk_loads_total > 0);
  assert.deepEqual((await lookup(second, LILY_XML)).tiers, { ram: 236, disk: 0, remote: 0 });

  // A schema name too long for a file name is a 400 that names the limit, not a 500 showing
  // where the cache lives.
  const long = await second.json('POST', '/v1/schemas', `<schema name="${'n'.repeat(10000)}">x</schema>`,
                                 { 'content-type': 'application/xml' });
  assert.equal(long.status, 400, long.text);
  assert.match(long.body.error.message, /at most 128/);
  assert.ok(!long.text.includes(dir), long.text);
  assert.ok(long.text.length < 2000, 'the name is not echoed whole');

  // Dropped schemas stay dropped.
  assert.equal((await second.json('DELETE', '/v1/schemas/story')).status, 200);
  assert.equal((await second.stop()).code, 0, second.stderr());
  const third = await startServer(['--cache-dir', dir]);
  assert.deepEqual((await third.json('GET', '/v1/schemas')).body.data, []);
  assert.equal((await third.stop()).code, 0);
});
