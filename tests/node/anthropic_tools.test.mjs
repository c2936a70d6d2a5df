// Anthropic tool use on /v1/messages through Anthropic's official client (@anthropic-ai/sdk), on
// stories260K with Qwen2.5's chat template (Hermes <tool_call> format). The model never saw a
// tool call: tool_choice any / tool makes the grammar force one, which must come back as a
// tool_use block (toolu_ id, the tool's name, an input that ajv validates against its
// input_schema) with stop_reason "tool_use"; streamed, as content_block_start {type: tool_use},
// input_json_delta deltas and content_block_stop, accumulating (the SDK's MessageStream) to the
// non-streamed input at temperature 0. A tool_result round trip renders as the chat route renders
// the same conversation (count_tokens equals the chat route's prompt_tokens) and reads the earlier
// turn's prefix from the cache.
//
// A call cut off by max_tokens fails these tests (stop_reason would be max_tokens, with no
// tool_use block), rather than passing with nothing checked.
import { test, before } from 'node:test';
import assert from 'node:assert/strict';
import path from 'node:path';
import Anthropic from '@anthropic-ai/sdk';
import Ajv from 'ajv';
import { startServer, MODEL, SHARED } from './server.mjs';

const weather = {
  name: 'get_weather',
  description: 'The weather in a city',
  input_schema: {
    type: 'object',
    properties: {
      city: { type: 'string', maxLength: 12, description: 'The city' },
      unit: { type: 'string', enum: ['celsius', 'fahrenheit'] },
      days: { type: 'integer', minimum: 1, maximum: 7 },
    },
    required: ['city', 'unit', 'days'],
    additionalProperties: false,
  },
};
const search = {
  name: 'search',
  description: 'Search the documents',
  input_schema: {
    type: 'object',
    properties: { query: { type: 'string', maxLength: 10 } },
    required: ['query'],
    additionalProperties: false,
  },
};
const tools = [weather, search];
const ajv = new Ajv({ strict: false });
const validators = Object.fromEntries(tools.map((t) => [t.name, ajv.compile(t.input_schema)]));

function checkToolUse(block, name) {
  assert.equal(block.type, 'tool_use');
  assert.match(block.id, /^toolu_[A-Za-z0-9]{24}$/);
  if (name) assert.equal(block.name, name);
  const valid = validators[block.name];
  assert.ok(valid, `unknown tool ${block.name}`);
  assert.ok(valid(block.input), `${JSON.stringify(block.input)}: ${ajv.errorsText(valid.errors)}`);
}

let s;
let client;
before(async () => {
  s = await startServer(['--chat-template', path.join(SHARED, 'templates', 'Qwen-Qwen2.5-7B-Instruct.jinja')]);
  client = new Anthropic({ baseURL: s.url, apiKey: 'unused', maxRetries: 0, timeout: 60000 });
});

const ask = [{ role: 'user', content: 'What is the weather in Paris?' }];
const base = { model: MODEL, max_tokens: 300, temperature: 0, messages: ask, tools };

test('tool_choice tool: a tool_use block whose input validates, stop_reason tool_use', async () => {
  const r = await client.messages.create({ ...base, tool_choice: { type: 'tool', name: 'get_weather' } });
  assert.equal(r.stop_reason, 'tool_use', JSON.stringify(r.content));
  assert.equal(r.stop_sequence, null);
  const uses = r.content.filter((b) => b.type === 'tool_use');
  assert.equal(uses.length, 1, JSON.stringify(r.content));
  checkToolUse(uses[0], 'get_weather');
  assert.ok(r.usage.output_tokens > 0);
});

test('tool_choice any, streamed: tool_use block events with input_json_delta, same as non-streamed', async () => {
  const params = { ...base, tool_choice: { type: 'any' } };
  const whole = await client.messages.create(params);
  assert.equal(whole.stop_reason, 'tool_use');
  const wholeUse = whole.content.find((b) => b.type === 'tool_use');
  checkToolUse(wholeUse);

  const stream = client.messages.stream(params);
  const events = [];
  stream.on('streamEvent', (e) => events.push(e));
  const final = await stream.finalMessage();
  assert.equal(final.stop_reason, 'tool_use');
  const finalUse = final.content.find((b) => b.type === 'tool_use');
  checkToolUse(finalUse);
  assert.equal(finalUse.name, wholeUse.name);
  assert.deepEqual(finalUse.input, wholeUse.input);

  // The protocol: message_start, then the tool_use block, its input in input_json_delta pieces
  // that concatenate to the input's JSON, its stop, then message_delta (tool_use) and message_stop.
  const types = events.filter((e) => e.type !== 'ping').map((e) => e.type);
  assert.equal(types[0], 'message_start');
  assert.deepEqual(types.slice(-2), ['message_delta', 'message_stop']);
  const i = events.findIndex((e) => e.type === 'content_block_start' && e.content_block.type === 'tool_use');
  assert.ok(i > 0, JSON.stringify(types));
  const start = events[i];
  assert.deepEqual(start.content_block.input, {});
  assert.equal(start.content_block.name, wholeUse.name);
  assert.match(start.content_block.id, /^toolu_/);
  const deltas = events.filter((e) => e.type === 'content_block_delta' && e.index === start.index);
  assert.ok(deltas.length >= 1);
  for (const d of deltas) assert.equal(d.delta.type, 'input_json_delta');
  assert.deepEqual(JSON.parse(deltas.map((d) => d.delta.partial_json).join('')), wholeUse.input);
  const stop = events.findIndex((e) => e.type === 'content_block_stop' && e.index === start.index);
  assert.ok(stop > events.indexOf(deltas.at(-1)));
  assert.equal(events.find((e) => e.type === 'message_delta').delta.stop_reason, 'tool_use');
});

test('tool_result round trip: rendered as the chat route renders it, and the prefix is cached', async () => {
  const first = await client.messages.create({ ...base, tool_choice: { type: 'tool', name: 'get_weather' } });
  assert.equal(first.stop_reason, 'tool_use');
  const use = first.content.find((b) => b.type === 'tool_use');
  checkToolUse(use, 'get_weather');
  const messages = [
    ...ask,
    { role: 'assistant', content: first.content },
    { role: 'user', content: [{ type: 'tool_result', tool_use_id: use.id, content: 'Sunny, 21 degrees' }] },
  ];
  const second = await client.messages.create({ ...base, max_tokens: 8, messages });
  assert.ok(['end_turn', 'max_tokens', 'tool_use'].includes(second.stop_reason));
  // The turn before was computed by the first request: its prefix comes from the cache.
  assert.ok(second.usage.cache_read_input_tokens > 0, JSON.stringify(second.usage));

  // The same conversation through the chat route (OpenAI's shape) is the same prompt.
  const counted = await client.messages.countTokens({ model: MODEL, messages, tools });
  const chat = await s.json('POST', '/v1/chat/completions', {
    model: MODEL,
    max_tokens: 1,
    tools: tools.map((t) => ({ type: 'function', function: { name: t.name, description: t.description, parameters: t.input_schema } })),
    messages: [
      ...ask,
      { role: 'assistant', content: null, tool_calls: [{ id: use.id, type: 'function', function: { name: use.name, arguments: JSON.stringify(use.input) } }] },
      { role: 'tool', tool_call_id: use.id, content: 'Sunny, 21 degrees' },
    ],
  });
  assert.equal(chat.status, 200, chat.text);
  assert.equal(counted.input_tokens, chat.body.usage.prompt_tokens);
  // And the result is in it: a longer result is a longer prompt.
  const longer = structuredClone(messages);
  longer[2].content[0].content = 'Sunny, 21 degrees, light wind from the west';
  assert.ok((await client.messages.countTokens({ model: MODEL, messages: longer, tools })).input_tokens > counted.input_tokens);
});

test('tool_choice none and auto; refusals name the field', async () => {
  const none = await client.messages.create({ ...base, max_tokens: 8, tool_choice: { type: 'none' } });
  assert.ok(none.content.every((b) => b.type === 'text'));
  assert.notEqual(none.stop_reason, 'tool_use');
  const auto = await client.messages.create({ ...base, max_tokens: 8 });
  assert.ok(['end_turn', 'max_tokens', 'tool_use'].includes(auto.stop_reason));
  const refused = async (params, pattern) => {
    await assert.rejects(client.messages.create({ ...base, ...params }), (e) => {
      assert.ok(e instanceof Anthropic.BadRequestError, `${e.constructor.name}: ${e.message}`);
      assert.match(e.error.error.message, pattern);
      return true;
    });
  };
  await refused({ tool_choice: { type: 'tool', name: 'nope' } }, /nope/);
  await refused({ tools: [{ name: 'x', input_schema: { type: 'object', properties: { a: { $ref: '#/nowhere' } } } }], tool_choice: { type: 'any' } }, /tools\[0\]\.input_schema/);
  await refused({ tools: [{ name: 'bad name', input_schema: {} }] }, /tools\[0\]\.name/);
  // Without a template that shows a tool-call format, tools are refused.
  const plain = await startServer([]);
  const plainClient = new Anthropic({ baseURL: plain.url, apiKey: 'unused', maxRetries: 0 });
  await assert.rejects(plainClient.messages.create({ ...base, tool_choice: { type: 'any' } }), /tool-call format/);
});
