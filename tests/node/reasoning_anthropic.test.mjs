// Reasoning models through Anthropic's Messages API, read by the real Anthropic SDK: the tiny
// Qwen3 with its real template and vocabulary (reasoning_model.mjs), its output forced by the
// route's `grammar` extension. Asserted: a thinking block (with the signature the SDK's types
// require) before the text, the stream's events in Anthropic's order (thinking_delta, one
// signature_delta, content_block_stop, then the text block) and stream().finalMessage() equal to
// the non-streamed message; `thinking` disabled switching Qwen3's enable_thinking; thinking blocks
// sent back reaching the template; a tool_use after thinking; clear 400s.
// budget_tokens closing the thinking (a second request continues after "</think>").
// Mutations caught (each made in the code, seen failing here, reverted): the stream's splitter
// not fed (no thinking block streamed); ThinkingSwitch ignoring the request (disabled renders the
// same prompt); thinking blocks dropped on the way in (count_tokens unchanged); the budget not
// applied (one thinking block to max_tokens).
import { test, before } from 'node:test';
import assert from 'node:assert/strict';
import path from 'node:path';
import Anthropic from '@anthropic-ai/sdk';
import { SHARED } from './server.mjs';
import { startReasoningServer, exactly, MODEL, THINKING, ANSWER, OUTPUT } from './reasoning_model.mjs';

let server, client;
before(async () => {
  server = await startReasoningServer();
  client = new Anthropic({ baseURL: server.url, apiKey: 'unused', maxRetries: 0, timeout: 60000 });
});

const USER = [{ role: 'user', content: 'What is 2+2?' }];
const THINK = { type: 'enabled', budget_tokens: 1024 };

function params(extra = {}) {
  return { model: MODEL, max_tokens: 2048, temperature: 0, messages: USER, thinking: THINK,
    grammar: exactly(OUTPUT), ...extra };
}

test('a thinking block with its signature, then the text; streamed the same', async () => {
  const m = await client.messages.create(params());
  assert.deepEqual(m.content.map((b) => b.type), ['thinking', 'text']);
  assert.equal(m.content[0].thinking, THINKING);
  assert.match(m.content[0].signature, /^pc1-[0-9a-f]{16}$/);
  assert.equal(m.content[1].text, ANSWER);
  assert.equal(m.stop_reason, 'end_turn');

  const stream = client.messages.stream(params());
  const events = [];
  stream.on('streamEvent', (e) => events.push(e.type === 'content_block_delta' ? e.delta.type
    : e.type === 'content_block_start' ? `start:${e.content_block.type}` : e.type));
  const final = await stream.finalMessage();
  assert.deepEqual(final.content, m.content);
  assert.equal(final.stop_reason, 'end_turn');
  // Anthropic's order: the thinking's deltas, its one signature, its stop, then the text block.
  const squeezed = events.filter((e, i) => e !== events[i - 1] && e !== 'ping');
  assert.deepEqual(squeezed, ['message_start', 'start:thinking', 'thinking_delta',
    'signature_delta', 'content_block_stop', 'start:text', 'text_delta', 'content_block_stop',
    'message_delta', 'message_stop']);
  assert.ok(events.filter((e) => e === 'thinking_delta').length > 1, 'the thinking streams in pieces');
});

test('thinking disabled switches the template (enable_thinking false); enabled is its default', async () => {
  const count = async (thinking) => (await client.messages.countTokens(
    { model: MODEL, messages: USER, ...(thinking ? { thinking } : {}) })).input_tokens;
  const on = await count(THINK);
  const added = await server.tokenize({ content: '<think>\n\n</think>\n\n', add_special: false });
  assert.equal(await count({ type: 'disabled' }), on + added.length);
  assert.equal(await count(null), on);
  assert.equal(await count({ type: 'adaptive' }), on);
  // The model then answers at once: no thinking block.
  const m = await client.messages.create(params({ thinking: { type: 'disabled' }, grammar: exactly(ANSWER) }));
  assert.deepEqual(m.content, [{ type: 'text', text: ANSWER }]);
});

const TOOLS = [{ name: 'add', description: 'Adds',
  input_schema: { type: 'object', properties: { a: { type: 'integer' }, b: { type: 'integer' } } } }];
const CALL = '<tool_call>\n{"name": "add", "arguments": {"a": 2, "b": 2}}\n</tool_call>';

test('a tool_use after thinking; thinking blocks sent back reach the template', async () => {
  const grammar = exactly(`<think>\nUse the tool.\n</think>\n\n${CALL}`);
  const m = await client.messages.create(params({ tools: TOOLS, grammar }));
  assert.deepEqual(m.content.map((b) => b.type), ['thinking', 'tool_use']);
  assert.equal(m.content[0].thinking, 'Use the tool.');
  assert.deepEqual(m.content[1].input, { a: 2, b: 2 });
  assert.equal(m.stop_reason, 'tool_use');
  const final = await client.messages.stream(params({ tools: TOOLS, grammar })).finalMessage();
  assert.deepEqual(final.content.map((b) => b.type), ['thinking', 'tool_use']);
  assert.equal(final.content[0].signature, m.content[0].signature);
  assert.deepEqual(final.content[1].input, { a: 2, b: 2 });
  assert.equal(final.stop_reason, 'tool_use');

  // The assistant turn goes back as the SDK returned it, then the tool's result.
  const turn = (content) => [...USER, { role: 'assistant', content },
    { role: 'user', content: [{ type: 'tool_result', tool_use_id: m.content[1].id, content: '4' }] }];
  const count = async (content) => (await client.messages.countTokens(
    { model: MODEL, tools: TOOLS, messages: turn(content) })).input_tokens;
  const withThinking = await count(m.content);
  // (Qwen3's template needs a string content: a turn of tool_use blocks alone has none, so the
  // turn without thinking sends an empty one.)
  const without = await count([{ ...m.content[0], thinking: '' }, m.content[1]]);
  // Qwen3's template renders the thinking of a turn after the last user query.
  const added = await server.tokenize({ content: '<think>\nUse the tool.\n</think>\n\n', add_special: false });
  assert.equal(withThinking, without + added.length);
  const next = await client.messages.create(params({ tools: TOOLS, messages: turn(m.content),
    grammar: exactly(`<think>\nDone.\n</think>\n\n${ANSWER}`) }));
  assert.equal(next.content.at(-1).text, ANSWER);
});

test('hostile input: clear 400s; an unclosed thinking is one thinking block', async () => {
  const cases = [
    [{ thinking: { type: 'enabled', budget_tokens: 4096 } }, 'thinking.budget_tokens'],
    [{ thinking: { type: 'enabled', budget_tokens: 10 } }, 'thinking.budget_tokens'],
    [{ thinking: { type: 'between_tools' } }, 'thinking.type'],
    [{ thinking: 'on' }, 'thinking'],
    [{ grammar: 'root ::= (' }, 'grammar'],
    [{ tools: TOOLS, tool_choice: { type: 'any' } }, 'grammar'],
  ];
  for (const [extra, param] of cases) {
    const r = await server.json('POST', '/v1/messages', params(extra));
    assert.equal(r.status, 400, JSON.stringify(extra));
    assert.equal(r.body.type, 'error');
    assert.ok(r.body.error.message.includes(param.split('.').pop()), r.body.error.message);
  }
  // Without `thinking` the template's default (Qwen3: on) holds, and the output is split all the
  // same; cut by max_tokens inside the thinking.
  const cut = params({ max_tokens: 12, thinking: undefined, grammar: 'root ::= "<think>\\n" [a-z]{100}' });
  const m = await client.messages.create(cut);
  assert.equal(m.stop_reason, 'max_tokens');
  assert.deepEqual(m.content.map((b) => b.type), ['thinking']);
  const final = await client.messages.stream(cut).finalMessage();
  assert.deepEqual(final.content, m.content);
  assert.ok(server.alive());
});

test('budget_tokens closes the thinking: the answer follows within max_tokens', async () => {
  // The R1 distills' template opens the thinking in the prompt, and the random model, unforced,
  // never closes it: without the budget the whole output would be one thinking block.
  const r1 = await startReasoningServer(['--chat-template',
    path.join(SHARED, 'templates', 'deepseek-ai-DeepSeek-R1-Distill-Qwen-32B.jinja')]);
  const c = new Anthropic({ baseURL: r1.url, apiKey: 'unused', maxRetries: 0, timeout: 60000 });
  const body = { model: MODEL, max_tokens: 1100, temperature: 0, messages: USER,
    thinking: { type: 'enabled', budget_tokens: 1024 } };
  const m = await c.messages.create(body);
  assert.deepEqual(m.content.map((b) => b.type), ['thinking', 'text']);
  assert.ok(m.content[1].text.length > 0);
  assert.equal(m.usage.output_tokens, 1100);
  assert.equal(m.stop_reason, 'max_tokens');
  const final = await c.messages.stream(body).finalMessage();
  assert.deepEqual(final.content, m.content);
  assert.equal(final.usage.output_tokens, 1100);
  // No room left after the budget for the closing tag and an answer: one thinking block.
  const full = await c.messages.create({ ...body, max_tokens: 1025 });
  assert.deepEqual(full.content.map((b) => b.type), ['thinking']);
  assert.equal(full.usage.output_tokens, 1024);
  await r1.stop();
});
