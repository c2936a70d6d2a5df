// Anthropic's Messages API through Anthropic's official client (@anthropic-ai/sdk): messages
// non-streamed and streamed (the same text at temperature 0, and the same as the chat route's),
// system blocks, cache_control breakpoints (usage's cache_creation_input_tokens and
// cache_read_input_tokens, pins that survive DELETE /v1/cache until their TTL passes), stop
// sequences, count_tokens, errors as the SDK's typed errors, and x-api-key authentication.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import Anthropic from '@anthropic-ai/sdk';
import { startServer, MODEL, STORY, BLOCK, commonPrefix, expectedCached } from './server.mjs';

function anthropic(server, options = {}) {
  return new Anthropic({ baseURL: server.url, apiKey: 'unused', maxRetries: 0, timeout: 60000, ...options });
}

// The Anthropic request's conversation in the chat route's format, for /tokenize.
function chatMessages(system, messages) {
  const text = (c) => (typeof c === 'string' ? c : c.map((b) => b.text).join(''));
  const out = system ? [{ role: 'system', content: text(system) }] : [];
  return out.concat(messages.map((m) => ({ role: m.role, content: text(m.content) })));
}

function assertUsageAddsUp(usage, promptTokens) {
  assert.equal(usage.input_tokens + usage.cache_read_input_tokens + usage.cache_creation_input_tokens,
    promptTokens, JSON.stringify(usage));
}

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

test('messages: non-streamed, streamed and the chat route agree at temperature 0', async () => {
  const s = await startServer();
  const client = anthropic(s);
  const messages = [{ role: 'user', content: 'Tell me a story about a dog.' }];
  const params = { model: MODEL, max_tokens: 24, temperature: 0, messages };
  const r = await client.messages.create(params);
  assert.match(r.id, /^msg_/);
  assert.equal(r.type, 'message');
  assert.equal(r.role, 'assistant');
  assert.equal(r.model, MODEL);
  assert.equal(r.content.length, 1);
  assert.equal(r.content[0].type, 'text');
  assert.ok(r.content[0].text.length > 0);
  assert.equal(r.stop_reason, 'max_tokens');  // stories260K tells long stories
  assert.equal(r.stop_sequence, null);
  assert.equal(r.usage.output_tokens, 24);
  const prompt = await s.tokenize({ messages: chatMessages(null, messages), add_generation_prompt: true });
  assertUsageAddsUp(r.usage, prompt.length);

  // The same conversation through the OpenAI chat route: the same text (an independent route
  // over the same prompt).
  const chat = await s.client().chat.completions.create({ model: MODEL, max_tokens: 24, temperature: 0, messages });
  assert.equal(chat.choices[0].message.content, r.content[0].text);
  assert.equal(chat.usage.prompt_tokens, prompt.length);

  // client.messages.stream: the accumulated text and the final message.
  const stream = client.messages.stream(params);
  let text = '';
  stream.on('text', (t) => { text += t; });
  const final = await stream.finalMessage();
  assert.equal(text, r.content[0].text);
  assert.equal(final.content[0].text, r.content[0].text);
  assert.equal(final.stop_reason, 'max_tokens');
  assert.equal(final.usage.output_tokens, 24);
  assertUsageAddsUp(final.usage, prompt.length);
  assert.ok(final.usage.cache_read_input_tokens > 0, 'the stream reused the earlier prompt');

  // stream: true gives the raw events in Anthropic's order.
  const events = [];
  for await (const ev of await client.messages.create({ ...params, stream: true })) events.push(ev);
  const types = events.map((e) => e.type).filter((t, i, a) => t !== 'content_block_delta' || a[i - 1] !== t);
  assert.deepEqual(types, ['message_start', 'content_block_start', 'content_block_delta',
    'content_block_stop', 'message_delta', 'message_stop']);
  assert.equal(events.filter((e) => e.type === 'content_block_delta').map((e) => e.delta.text).join(''),
    r.content[0].text);
});

test('system blocks and a cache_control breakpoint: created once, then read', async () => {
  const s = await startServer();
  const client = anthropic(s);
  const system = [{ type: 'text', text: STORY, cache_control: { type: 'ephemeral' } }];
  const ask = (q) => client.messages.create({ model: MODEL, max_tokens: 4, temperature: 0, system,
    messages: [{ role: 'user', content: [{ type: 'text', text: q }] }] });

  const first = await ask('What did Lily see?');
  // The reference: the chat route's breakpoint over the same conversation (/tokenize's pin_tokens).
  const firstChat = chatMessages(system, [{ role: 'user', content: 'What did Lily see?' }]);
  firstChat[0].cache_control = { type: 'ephemeral' };
  const t = (await s.json('POST', '/tokenize', { messages: firstChat, add_generation_prompt: true })).body;
  assert.ok(t.pin_tokens > 10 * BLOCK, `the breakpoint covers ${t.pin_tokens} tokens`);
  assert.equal(first.usage.cache_read_input_tokens, 0);
  assert.equal(first.usage.cache_creation_input_tokens, Math.floor(t.pin_tokens / BLOCK) * BLOCK);
  assertUsageAddsUp(first.usage, t.count);

  const second = await ask('Who played with the dog?');
  const secondTokens = await s.tokenize({
    messages: chatMessages(system, [{ role: 'user', content: 'Who played with the dog?' }]), add_generation_prompt: true });
  assert.ok(second.usage.cache_read_input_tokens > 0);
  assert.equal(second.usage.cache_read_input_tokens,
    expectedCached(commonPrefix(t.tokens, secondTokens), secondTokens.length));
  assert.ok(second.usage.cache_read_input_tokens >= first.usage.cache_creation_input_tokens);
  assert.equal(second.usage.cache_creation_input_tokens, 0);
  assertUsageAddsUp(second.usage, secondTokens.length);

  // count_tokens: the prompt's length, computing nothing.
  const count = await client.messages.countTokens({ model: MODEL, system,
    messages: [{ role: 'user', content: 'Who played with the dog?' }] });
  assert.equal(count.input_tokens, secondTokens.length);
});

test('a pinned prefix survives DELETE /v1/cache until its TTL passes; hits renew it', async () => {
  // TTLs shortened 60 times: "5m" is 5 s, "1h" 60 s.
  const s = await startServer(['--cache-control-ttl-scale', String(1 / 60)]);
  const client = anthropic(s);
  const ask = (system, ttl, q) => client.messages.create({ model: MODEL, max_tokens: 2, temperature: 0,
    system: [{ type: 'text', text: system, cache_control: { type: 'ephemeral', ...(ttl ? { ttl } : {}) } }],
    messages: [{ role: 'user', content: q }] });
  const drop = async () => assert.equal((await s.json('DELETE', '/v1/cache')).status, 200);

  // "1h": pinned well beyond this test.
  const long = STORY + ' Lily had a cat named Tom.';
  assert.ok((await ask(long, '1h', 'A question.')).usage.cache_creation_input_tokens > 0);
  await drop();
  assert.ok((await ask(long, '1h', 'Another question.')).usage.cache_read_input_tokens > 10 * BLOCK);
  const tree = (await s.json('GET', '/v1/cache/tree')).body.data;
  assert.ok(tree.filter((b) => b.pinned).length >= 10, JSON.stringify(tree.map((b) => b.pinned)));

  // "5m" (5 s here): survives a drop right away, is gone after its TTL without hits.
  const short = 'The little dog ran to the park every morning. ' + STORY;
  const created = (await ask(short, undefined, 'A question.')).usage.cache_creation_input_tokens;
  assert.ok(created > 0);
  await drop();
  const hit = await ask(short, '5m', 'Another question.');
  assert.ok(hit.usage.cache_read_input_tokens >= created, JSON.stringify(hit.usage));
  await sleep(5500);  // more than 5 s after the last hit
  await drop();
  const gone = await ask(short, '5m', 'A third question.');
  assert.equal(gone.usage.cache_read_input_tokens, 0);
  assert.ok(gone.usage.cache_creation_input_tokens > 0);  // pinned afresh
  // The "1h" pin is still there.
  assert.ok((await ask(long, '1h', 'A last question.')).usage.cache_read_input_tokens > 10 * BLOCK);
});

test('stop sequences end the message with stop_reason stop_sequence', async () => {
  const s = await startServer();
  const client = anthropic(s);
  const params = { model: MODEL, max_tokens: 48, temperature: 0, messages: [{ role: 'user', content: 'Once upon a time' }] };
  const free = (await client.messages.create(params)).content[0].text;
  const words = free.split(' ').filter((w) => w.length >= 3);
  assert.ok(words.length > 2, free);
  const stop = words[2];
  const r = await client.messages.create({ ...params, stop_sequences: ['zzzz', stop] });
  assert.equal(r.stop_reason, 'stop_sequence');
  assert.equal(r.stop_sequence, stop);
  assert.equal(r.content[0].text, free.slice(0, free.indexOf(stop)));
});

test('errors are the SDK typed errors, in Anthropic shape', async () => {
  const s = await startServer();
  const client = anthropic(s);
  const messages = [{ role: 'user', content: 'Hi' }];
  const expectError = async (params, type, pattern) => {
    await assert.rejects(client.messages.create(params), (e) => {
      assert.ok(e instanceof type, `${e.constructor.name}: ${e.message}`);
      assert.equal(e.error?.type, 'error');
      assert.match(e.error.error.message, pattern);
      return true;
    });
  };
  await expectError({ model: MODEL, max_tokens: 4, messages, temprature: 0.5 }, Anthropic.BadRequestError, /temprature/);
  await expectError({ model: MODEL, messages }, Anthropic.BadRequestError, /max_tokens/);
  await expectError({ model: MODEL, max_tokens: 4, messages: [{ role: 'user', content: [
    { type: 'image', source: { type: 'base64', media_type: 'image/png', data: 'iVBORw0KGgo=' } }] }] },
  Anthropic.BadRequestError, /image/);
  await expectError({ model: 'claude-nonexistent', max_tokens: 4, messages }, Anthropic.NotFoundError, /claude-nonexistent/);
  await expectError({ model: MODEL, max_tokens: 4, messages, tools: [{ name: 't', input_schema: { type: 'object' } }] },
    Anthropic.BadRequestError, /tools/);
  const raw = await s.json('POST', '/v1/messages', { model: MODEL, messages });
  assert.equal(raw.status, 400);
  assert.equal(raw.body.type, 'error');
  assert.equal(raw.body.error.type, 'invalid_request_error');
  assert.equal((await s.json('GET', '/v1/messages')).body.error.type, 'invalid_request_error');  // 405
});

test('x-api-key and Authorization: Bearer with --api-key', async () => {
  const s = await startServer(['--api-key', 'secret-key']);
  const params = { model: MODEL, max_tokens: 2, messages: [{ role: 'user', content: 'Hi' }] };
  const r = await anthropic(s, { apiKey: 'secret-key' }).messages.create(params);
  assert.equal(r.type, 'message');
  const bearer = await anthropic(s, { apiKey: null, authToken: 'secret-key' }).messages.create(params);
  assert.equal(bearer.type, 'message');
  await assert.rejects(anthropic(s, { apiKey: 'wrong' }).messages.create(params), (e) => {
    assert.ok(e instanceof Anthropic.AuthenticationError, e.constructor.name);
    assert.equal(e.error.error.type, 'authentication_error');
    return true;
  });
  // The key works on the OpenAI routes too.
  const models = await s.json('GET', '/v1/models', undefined, { 'x-api-key': 'secret-key' });
  assert.equal(models.status, 200);
});
