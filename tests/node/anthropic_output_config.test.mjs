// Anthropic's 2026 request fields through Anthropic's official client (@anthropic-ai/sdk):
// structured outputs (`output_config.format`, the SDK's zodOutputFormat and messages.parse, whose
// parsed_output zod validates), its conflicts with tool_choice and grammar, `output_config.effort`
// (refused where the template reads no reasoning_effort; tests/node/harmony.test.mjs has one
// that does), a top-level `cache_control` (a breakpoint at the end of the last message, as the
// chat route's over the same conversation), and the fields accepted as meaningless here (speed,
// inference_geo).
//
// Mutations tried (each failed these tests, then reverted): the format's grammar dropped
// (anthropic_routes.cc: grammar = r.grammar only) fails the zod parse; the top-level breakpoint
// placed at the start of the last message fails the cache_creation figure; the schema read
// without the client's key order (anthropic_thinking.cc) fails the property order.
import { test, before } from 'node:test';
import assert from 'node:assert/strict';
import Anthropic from '@anthropic-ai/sdk';
import { zodOutputFormat } from '@anthropic-ai/sdk/helpers/zod';
import { z } from 'zod/v4';
import path from 'node:path';
import { startServer, MODEL, SHARED, STORY, BLOCK } from './server.mjs';

let s;
let client;
before(async () => {
  // Qwen 2.5's template: a tool-call format (for the tool_choice conflict), no reasoning_effort.
  s = await startServer(['--chat-template', path.join(SHARED, 'templates', 'Qwen-Qwen2.5-7B-Instruct.jinja')]);
  client = new Anthropic({ baseURL: s.url, apiKey: 'unused', maxRetries: 0, timeout: 60000 });
});

const messages = [{ role: 'user', content: 'Tell me about a pet.' }];
// What a grammar can bound for this tiny model (the SDK moves maxLength and the like out of the
// schema it sends, to check them itself).
const Pet = z.object({ pet: z.enum(['dog', 'cat']), happy: z.boolean(), color: z.enum(['red', 'blue']) });

test('output_config.format: the answer is JSON of the schema, parsed by the SDK, streamed too', async () => {
  const params = { model: MODEL, max_tokens: 200, temperature: 0, messages,
    output_config: { format: zodOutputFormat(Pet) } };
  const m = await client.messages.parse(params);
  // Cut off before the object closes would be max_tokens (and fail the parse).
  assert.equal(m.stop_reason, 'end_turn', JSON.stringify(m.content));
  assert.ok(Pet.safeParse(m.parsed_output).success, JSON.stringify(m.parsed_output));
  assert.deepEqual(JSON.parse(m.content[0].text), m.parsed_output);
  // The properties come in the schema's order (zod's), not sorted.
  assert.deepEqual(Object.keys(JSON.parse(m.content[0].text)), ['pet', 'happy', 'color']);
  const streamed = await client.messages.stream(params).finalMessage();
  assert.deepEqual(streamed.parsed_output, m.parsed_output);
  // Without the format this model writes words, not an object.
  const free = await client.messages.create({ model: MODEL, max_tokens: 8, temperature: 0, messages });
  assert.doesNotMatch(free.content[0].text, /^\s*\{/);
});

test('output_config: bad values, and two constraints at once, are 400s naming the field', async () => {
  const base = { model: MODEL, max_tokens: 8, messages };
  const format = { type: 'json_schema', schema: { type: 'object', properties: { a: { type: 'string' } } } };
  const tools = [{ name: 'f', input_schema: { type: 'object', properties: {} } }];
  const cases = [
    [{ output_config: { format, effort: 'high' } }, 'output_config.effort'],  // no reasoning_effort here
    [{ output_config: { effort: 'extreme' } }, 'output_config.effort'],
    [{ output_config: { format: { type: 'json_object' } } }, 'output_config.format.type'],
    [{ output_config: { format: { type: 'json_schema' } } }, 'output_config.format.schema'],
    [{ output_config: { format, verbosity: 1 } }, 'output_config.verbosity'],
    [{ output_config: { format }, tools, tool_choice: { type: 'any' } }, 'output_config.format'],
    [{ output_config: { format }, grammar: 'root ::= "x"' }, 'output_config.format'],
    [{ output_config: 'json' }, 'output_config'],
  ];
  for (const [extra, param] of cases) {
    await assert.rejects(client.messages.create({ ...base, ...extra }), (e) => {
      assert.equal(e.status, 400, JSON.stringify(extra));
      assert.match(e.message, new RegExp(param.replaceAll('.', '\\.')), JSON.stringify(extra));
      return true;
    });
  }
  // Meaningless here, accepted: the fast mode and the region.
  const r = await client.messages.create({ ...base, speed: 'fast', inference_geo: 'us' });
  assert.equal(r.type, 'message');
});

test('a top-level cache_control is a breakpoint at the end of the last message', async () => {
  const server = await startServer();
  const c = new Anthropic({ baseURL: server.url, apiKey: 'unused', maxRetries: 0, timeout: 60000 });
  const conversation = [{ role: 'user', content: STORY }];
  const first = await c.messages.create({ model: MODEL, max_tokens: 2, temperature: 0,
    messages: conversation, cache_control: { type: 'ephemeral' } });
  // The reference: the chat route's breakpoint on that message (/tokenize's pin_tokens).
  const t = (await server.json('POST', '/tokenize', {
    messages: [{ role: 'user', content: STORY, cache_control: { type: 'ephemeral' } }],
    add_generation_prompt: true })).body;
  assert.ok(t.pin_tokens > 4 * BLOCK, `${t.pin_tokens}`);
  assert.equal(first.usage.cache_creation_input_tokens, Math.floor(t.pin_tokens / BLOCK) * BLOCK,
    JSON.stringify(first.usage));
  // count_tokens takes it too; a bad one is a 400 naming it.
  const count = await c.messages.countTokens({ model: MODEL, messages: conversation,
    cache_control: { type: 'ephemeral' } });
  assert.equal(count.input_tokens, t.count);
  await assert.rejects(c.messages.create({ model: MODEL, max_tokens: 2, messages: conversation,
    cache_control: { type: 'persistent' } }), (e) => e.status === 400 && /cache_control/.test(e.message));
});
