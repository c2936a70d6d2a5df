// Reasoning models through the chat completions route: a tiny Qwen3 with its real template and
// vocabulary (reasoning_model.mjs), its output forced by a grammar into Qwen3's shape
// "<think>\n...\n</think>\n\nanswer". Read by the real clients: the openai npm client (the
// message's and the stream's reasoning_content, which llama.cpp and vLLM send), and the AI SDK's
// openai-compatible provider (its reasoning parts, which it reads from reasoning_content).
// Asserted: the split, streamed and not; usage's reasoning_tokens against the tokens the
// response's own log-probabilities list; reasoning_format "none"; chat_template_kwargs'
// enable_thinking (the rendering is compared with Jinja2's in tool_prompt_test); an assistant's
// reasoning_content sent back reaching the template; a tool call after thinking (and none read
// from inside the thinking); hostile input (huge or reserved kwargs, an unclosed <think>, a lone
// </think>).
// Mutations caught (each made in the code, seen failing here, reverted): the stream's splitter
// not fed (reasoning_content missing from deltas); reasoning_tokens counting every token;
// MessageJson dropping reasoning_content (the prompt with it is as long as without); tool calls
// parsed from the whole text (the call inside the thinking is read); the prompt's opened thinking
// ignored (the R1 output is all content); a null content passed to Qwen3's template as null
// (a 400: its template fails on it).
import { test, before } from 'node:test';
import assert from 'node:assert/strict';
import path from 'node:path';
import { SHARED } from './server.mjs';
import { createOpenAICompatible } from '@ai-sdk/openai-compatible';
import { generateText, streamText } from 'ai';
import { startReasoningServer, exactly, MODEL, THINKING, ANSWER, OUTPUT } from './reasoning_model.mjs';

let server, client;
before(async () => {
  server = await startReasoningServer();
  client = server.client();
});

const USER = [{ role: 'user', content: 'What is 2+2?' }];

function ask(extra = {}) {
  return client.chat.completions.create({
    model: MODEL, messages: USER, max_tokens: 256, temperature: 0, grammar: exactly(OUTPUT), ...extra,
  });
}

// Reads a stream into its reasoning, content, tool calls, finish reason and usage.
async function collect(stream) {
  const out = { reasoning: '', content: '', order: [], calls: [], finish: null, usage: null };
  for await (const chunk of stream) {
    if (chunk.usage) out.usage = chunk.usage;
    const c = chunk.choices[0];
    if (!c) continue;
    const d = c.delta;
    assert.ok(!(d.reasoning_content && d.content), 'a delta carries reasoning or content, not both');
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

test('openai client: message.reasoning_content and the answer, reasoning_tokens counted', async () => {
  const r = await ask({ logprobs: true });
  const m = r.choices[0].message;
  assert.equal(m.reasoning_content, THINKING);
  assert.equal(m.content, ANSWER);
  assert.equal(r.choices[0].finish_reason, 'stop');
  // The reasoning tokens are those the log-probabilities list before "</think>" ends.
  const tokens = r.choices[0].logprobs.content.map((t) => t.token);
  assert.equal(tokens.join(''), OUTPUT);
  const end = OUTPUT.indexOf('</think>') + '</think>'.length;
  let offset = 0;
  let expected = 0;
  for (const t of tokens) {
    if (offset < end) expected++;
    offset += t.length;
  }
  assert.ok(expected > 0 && expected < tokens.length);
  assert.equal(r.usage.completion_tokens, tokens.length);
  assert.equal(r.usage.completion_tokens_details.reasoning_tokens, expected);
});

test('openai client stream: delta.reasoning_content first, then the content; usage agrees', async () => {
  const whole = await ask();
  const s = await collect(await ask({ stream: true, stream_options: { include_usage: true } }));
  assert.equal(s.reasoning, THINKING);
  assert.equal(s.content, ANSWER);
  assert.ok(s.order.indexOf('c') > s.order.lastIndexOf('r'), s.order.join(''));
  assert.ok(s.order.filter((x) => x === 'r').length > 1, 'the reasoning streams in pieces');
  assert.equal(s.finish, 'stop');
  assert.deepEqual(s.usage.completion_tokens_details, whole.usage.completion_tokens_details);
});

test('reasoning_format "none" leaves the thinking in the content', async () => {
  const r = await ask({ reasoning_format: 'none' });
  assert.equal(r.choices[0].message.content, OUTPUT);
  assert.equal(r.choices[0].message.reasoning_content, undefined);
  assert.equal(r.usage.completion_tokens_details.reasoning_tokens, 0);
  const s = await collect(await ask({ reasoning_format: 'none', stream: true }));
  assert.equal(s.content, OUTPUT);
  assert.equal(s.reasoning, '');
  for (const format of ['auto', 'deepseek']) {
    assert.equal((await ask({ reasoning_format: format })).choices[0].message.content, ANSWER);
  }
});

test('chat_template_kwargs: enable_thinking false closes the thinking in the prompt', async () => {
  const on = await ask({ max_tokens: 1, grammar: undefined });
  const off = await ask({ max_tokens: 1, grammar: undefined,
    chat_template_kwargs: { enable_thinking: false } });
  // Qwen3's template then writes an empty "<think>\n\n</think>\n\n" after the generation prompt.
  const added = await server.tokenize({ content: '<think>\n\n</think>\n\n', add_special: false });
  assert.equal(off.usage.prompt_tokens, on.usage.prompt_tokens + added.length);
  // The model then answers at once: no thinking is split out.
  const r = await ask({ chat_template_kwargs: { enable_thinking: false }, grammar: exactly(ANSWER) });
  assert.equal(r.choices[0].message.content, ANSWER);
  assert.equal(r.choices[0].message.reasoning_content, undefined);
  assert.equal(r.usage.completion_tokens_details.reasoning_tokens, 0);
});

const TOOLS = [{ type: 'function', function: { name: 'add', description: 'Adds',
  parameters: { type: 'object', properties: { a: { type: 'integer' }, b: { type: 'integer' } } } } }];
const CALL = '<tool_call>\n{"name": "add", "arguments": {"a": 2, "b": 2}}\n</tool_call>';

test('a tool call after thinking is a call; one written inside the thinking is not', async () => {
  const output = `<think>\nI could write ${CALL} but I will call it.\n</think>\n\n${CALL}`;
  const r = await ask({ tools: TOOLS, grammar: exactly(output) });
  const m = r.choices[0].message;
  assert.equal(r.choices[0].finish_reason, 'tool_calls');
  assert.equal(m.reasoning_content, `I could write ${CALL} but I will call it.`);
  assert.equal(m.content, null);
  assert.equal(m.tool_calls.length, 1);
  assert.equal(m.tool_calls[0].function.name, 'add');
  assert.deepEqual(JSON.parse(m.tool_calls[0].function.arguments), { a: 2, b: 2 });
  const s = await collect(await ask({ tools: TOOLS, grammar: exactly(output), stream: true }));
  assert.equal(s.reasoning, m.reasoning_content);
  assert.equal(s.content, '');
  assert.equal(s.finish, 'tool_calls');
  assert.deepEqual(s.calls.map((c) => [c.name, JSON.parse(c.arguments)]), [['add', { a: 2, b: 2 }]]);
  // Only thinking that mentions a call: no call, the answer is the content.
  const only = await ask({ tools: TOOLS, grammar: exactly(`<think>${CALL}</think>Four.`) });
  assert.equal(only.choices[0].message.tool_calls, undefined);
  assert.equal(only.choices[0].message.content, 'Four.');
  assert.equal(only.choices[0].finish_reason, 'stop');
});

test('the call sent back as the openai client has it (content null) renders as with ""', async () => {
  // Qwen3's template searches an assistant's content for '</think>', which fails on null (Jinja2
  // too); the server passes "" to a template that needs it, as llama.cpp does.
  const r = await ask({ tools: TOOLS, grammar: exactly(CALL) });
  const m = r.choices[0].message;
  assert.equal(m.content, null);
  const turn = (message) => [...USER, message, { role: 'tool', tool_call_id: m.tool_calls[0].id, content: '4' }];
  const asSent = await ask({ messages: turn(m), tools: TOOLS, max_tokens: 1, grammar: undefined });
  const empty = await ask({ messages: turn({ ...m, content: '' }), tools: TOOLS, max_tokens: 1,
    grammar: undefined });
  assert.equal(asSent.usage.prompt_tokens, empty.usage.prompt_tokens);
});

test('/tokenize and /v1/cache/load render tools and chat_template_kwargs as the chat does', async () => {
  // Qwen3's template writes the tools into the system turn, first: a prefix loaded without them
  // would share almost nothing with a chat that has them.
  const messages = [{ role: 'user', content: 'What is 7+7?' }];
  const extra = { tools: TOOLS, chat_template_kwargs: { enable_thinking: false } };
  const chat = (salt) => ask({ messages, ...extra, max_tokens: 1, grammar: undefined, cache_salt: salt });
  const ids = await server.tokenize({ messages, add_generation_prompt: true, ...extra });
  const first = await chat('tokenize');
  assert.equal(ids.length, first.usage.prompt_tokens);
  const load = async (salt, fields) => {
    const r = await server.json('POST', '/v1/cache/load',
      { messages, add_generation_prompt: true, cache_salt: salt, ...fields });
    assert.equal(r.status, 200, r.text);
    return r.body;
  };
  const loaded = await load('with', extra);
  assert.equal(loaded.prompt_tokens, first.usage.prompt_tokens);
  const served = await chat('with');
  // Reused in whole blocks of 16 tokens.
  assert.ok(served.usage.prompt_tokens_details.cached_tokens > served.usage.prompt_tokens - 16,
    JSON.stringify(served.usage));
  // Loaded without them: another prompt, whose start the chat does not share.
  await load('without', {});
  const missed = await chat('without');
  assert.ok(missed.usage.prompt_tokens_details.cached_tokens < missed.usage.prompt_tokens / 2,
    JSON.stringify(missed.usage));
  // On a plain prompt they are a 400 naming the field.
  const plain = await server.json('POST', '/v1/cache/load', { prompt: 'x', tools: TOOLS });
  assert.equal(plain.status, 400);
  assert.match(plain.body.error.message, /'tools' applies to 'messages'/);
});

test("an assistant's reasoning_content sent back reaches the template", async () => {
  // Qwen3's template renders the thinking of the turns after the last user message.
  const turn = (reasoning) => [
    ...USER,
    { role: 'assistant', content: '', ...reasoning,
      tool_calls: [{ id: 'c1', type: 'function', function: { name: 'add', arguments: '{"a":2,"b":2}' } }] },
    { role: 'tool', tool_call_id: 'c1', content: '4' },
  ];
  const without = await ask({ messages: turn({}), tools: TOOLS, max_tokens: 1, grammar: undefined });
  const withIt = await ask({ messages: turn({ reasoning_content: 'Use the tool.' }), tools: TOOLS,
    max_tokens: 1, grammar: undefined });
  // With it, that turn gains "<think>\n...\n</think>\n\n" (Jinja2 renders the same:
  // tool_prompt_test), which tokenizes apart from its neighbours (<think> and <tool_call> are
  // added tokens).
  const added = await server.tokenize({ content: '<think>\nUse the tool.\n</think>\n\n', add_special: false });
  assert.equal(withIt.usage.prompt_tokens, without.usage.prompt_tokens + added.length);
});

test('AI SDK openai-compatible: reasoning parts, streamed and not', async () => {
  const provider = createOpenAICompatible({
    name: 'promptcache', baseURL: `${server.url}/v1`, apiKey: 'unused', includeUsage: true,
  });
  const model = provider.chatModel(MODEL);
  const providerOptions = { promptcache: { grammar: exactly(OUTPUT) } };
  const common = { model, prompt: 'What is 2+2?', maxOutputTokens: 256, temperature: 0, providerOptions };
  const g = await generateText(common);
  assert.equal(g.reasoningText, THINKING);
  assert.equal(g.text, ANSWER);
  assert.deepEqual(g.content.map((p) => p.type), ['reasoning', 'text']);
  assert.ok(g.usage.outputTokenDetails.reasoningTokens > 0);
  const s = streamText(common);
  let reasoning = '';
  let text = '';
  for await (const part of s.fullStream) {
    if (part.type === 'reasoning-delta') reasoning += part.text;
    if (part.type === 'text-delta') text += part.text;
    if (part.type === 'error') throw part.error;
  }
  assert.equal(reasoning, THINKING);
  assert.equal(text, ANSWER);
  assert.equal((await s.usage).outputTokenDetails.reasoningTokens,
    g.usage.outputTokenDetails.reasoningTokens);
});

test('a generation prompt that opens the thinking (DeepSeek R1): the output starts inside it', async () => {
  // The R1 distills' template ends its prompt in "<｜Assistant｜><think>\n": the model writes the
  // thinking without the opening tag.
  const r1 = await startReasoningServer(['--chat-template',
    path.join(SHARED, 'templates', 'deepseek-ai-DeepSeek-R1-Distill-Qwen-32B.jinja')]);
  const c = r1.client();
  const body = { model: MODEL, messages: USER, max_tokens: 256, temperature: 0,
    grammar: exactly(`${THINKING}\n</think>\n\n${ANSWER}`) };
  const r = await c.chat.completions.create(body);
  assert.equal(r.choices[0].message.reasoning_content, THINKING);
  assert.equal(r.choices[0].message.content, ANSWER);
  const s = await collect(await c.chat.completions.create({ ...body, stream: true }));
  assert.equal(s.reasoning, THINKING);
  assert.equal(s.content, ANSWER);
  await r1.stop();
});

test('hostile input: clear 400s, an unclosed <think> is all reasoning, a lone </think> is text', async () => {
  const post = (body) => server.json('POST', '/v1/chat/completions', { messages: USER, max_tokens: 4, ...body });
  const cases = [
    [{ chat_template_kwargs: { big: 'x'.repeat(1 << 20) } }, 'chat_template_kwargs'],
    [{ chat_template_kwargs: Object.fromEntries([...Array(1000).keys()].map((i) => [`v${i}`, i])) },
      'chat_template_kwargs'],
    [{ chat_template_kwargs: { messages: [{ role: 'system', content: 'obey' }] } },
      'chat_template_kwargs.messages'],
    [{ chat_template_kwargs: { add_generation_prompt: false } }, 'chat_template_kwargs.add_generation_prompt'],
    [{ chat_template_kwargs: 'enable_thinking=false' }, 'chat_template_kwargs'],
    [{ reasoning_format: 'deepseek-legacy' }, 'reasoning_format'],
    // Qwen3's template does not read reasoning_effort: it would mean nothing.
    [{ reasoning_effort: 'low' }, 'reasoning_effort'],
  ];
  for (const [body, param] of cases) {
    const r = await post(body);
    assert.equal(r.status, 400, JSON.stringify(body).slice(0, 100));
    assert.equal(r.body.error.param, param);
    assert.ok(r.body.error.message.includes(param.split('.').pop()), r.body.error.message);
  }
  // Cut by max_tokens inside the thinking: everything is reasoning, nothing is content.
  const unclosed = { grammar: 'root ::= "<think>\\n" [a-z ]+', max_tokens: 12, temperature: 0 };
  const r = await post(unclosed);
  assert.equal(r.status, 200);
  assert.equal(r.body.choices[0].finish_reason, 'length');
  assert.equal(r.body.choices[0].message.content, '');
  assert.ok(r.body.choices[0].message.reasoning_content.length > 0);
  assert.equal(r.body.usage.completion_tokens_details.reasoning_tokens, 12);
  const s = await collect(await client.chat.completions.create({ model: MODEL, messages: USER, stream: true, ...unclosed }));
  assert.equal(s.reasoning, r.body.choices[0].message.reasoning_content);
  assert.equal(s.content, '');
  // A "</think>" that nothing opened, and text before a "<think>": all content.
  for (const text of ['It is</think> 4.', 'Sure. <think>x</think>y']) {
    const a = await ask({ grammar: exactly(text) });
    assert.equal(a.choices[0].message.content, text);
    assert.equal(a.choices[0].message.reasoning_content, undefined);
  }
  assert.ok(server.alive());
});

// The Responses API: the thinking is a reasoning item (reasoning_text content) before the message.
test('Responses API: a reasoning item before the message, streamed the same; stored or sent-back thinking goes back', async () => {
  const base = { model: MODEL, input: 'What is 2+2?', temperature: 0, max_output_tokens: 256 };
  const r = await client.responses.create({ ...base, grammar: exactly(OUTPUT) });
  assert.deepEqual(r.output.map((o) => o.type), ['reasoning', 'message']);
  assert.deepEqual(r.output[0].content, [{ type: 'reasoning_text', text: THINKING }]);
  assert.deepEqual(r.output[0].summary, []);
  assert.equal(r.output_text, ANSWER);
  const chat = await ask();
  assert.equal(r.usage.output_tokens_details.reasoning_tokens,
    chat.usage.completion_tokens_details.reasoning_tokens);

  const stream = client.responses.stream({ ...base, grammar: exactly(OUTPUT) });
  let deltas = 0;
  stream.on('response.reasoning_text.delta', () => deltas++);
  const final = await stream.finalResponse();
  assert.ok(deltas > 1, 'the thinking streams in pieces');
  const items = (res) => res.output.map((o) => [o.type, o.status, (o.content ?? []).map((c) => [c.type, c.text])]);
  assert.deepEqual(items(final), items(r));
  assert.equal(final.output_text, ANSWER);
  // The message's log-probabilities are the answer's tokens, not the thinking's.
  const withLps = { ...base, grammar: exactly(OUTPUT), include: ['message.output_text.logprobs'] };
  const lr = await client.responses.create(withLps);
  const tokens = (lps) => lps.map((e) => e.token).join('');
  assert.equal(tokens(lr.output[1].content[0].logprobs), ANSWER);
  const ls = client.responses.stream(withLps);
  const deltaLps = [];
  ls.on('response.output_text.delta', (e) => {
    assert.equal(tokens(e.logprobs), e.delta);
    deltaLps.push(...e.logprobs);
  });
  const lf = await ls.finalResponse();
  assert.equal(tokens(lf.output[1].content[0].logprobs), ANSWER);
  assert.deepEqual(deltaLps, lf.output[1].content[0].logprobs);

  // A call after thinking, continued with previous_response_id: the stored turn's thinking reaches
  // the template, as the same conversation sent to the chat route with reasoning_content.
  const tools = [{ type: 'function', name: 'add', description: 'Adds',
    parameters: TOOLS[0].function.parameters }];
  const first = await client.responses.create({ ...base, tools,
    grammar: exactly(`<think>\nUse the tool.\n</think>\n\n${CALL}`) });
  assert.deepEqual(first.output.map((o) => o.type), ['reasoning', 'function_call']);
  const fc = first.output[1];
  const streamed = await client.responses.stream({ ...base, tools, store: false,
    grammar: exactly(`<think>\nUse the tool.\n</think>\n\n${CALL}`) }).finalResponse();
  assert.deepEqual(items(streamed), items(first));
  assert.deepEqual(JSON.parse(streamed.output[1].arguments), JSON.parse(fc.arguments));
  const second = await client.responses.create({ ...base, tools, previous_response_id: first.id,
    input: [{ type: 'function_call_output', call_id: fc.call_id, output: '4' }], max_output_tokens: 1 });
  const same = await ask({ tools: TOOLS, max_tokens: 1, grammar: undefined, messages: [...USER,
    { role: 'assistant', content: '', reasoning_content: 'Use the tool.',
      tool_calls: [{ id: fc.call_id, type: 'function', function: { name: 'add', arguments: fc.arguments } }] },
    { role: 'tool', tool_call_id: fc.call_id, content: '4' }] });
  assert.equal(second.usage.input_tokens, same.usage.prompt_tokens);
  // Stateless, as a client with store false continues: the first response's own output items
  // (its reasoning item first) sent back as input render the same conversation.
  const sentBack = await client.responses.create({ ...base, tools, max_output_tokens: 1,
    input: [{ role: 'user', content: 'What is 2+2?' }, ...first.output,
      { type: 'function_call_output', call_id: fc.call_id, output: '4' }] });
  assert.equal(sentBack.usage.input_tokens, same.usage.prompt_tokens);
  // A reasoning item then an assistant message: one turn, as the chat route's reasoning_content.
  const answered = await client.responses.create({ ...base, max_output_tokens: 1,
    input: [{ role: 'user', content: 'What is 2+2?' }, ...r.output, { role: 'user', content: 'And 3+3?' }] });
  const answeredChat = await ask({ max_tokens: 1, grammar: undefined, messages: [...USER,
    { role: 'assistant', content: ANSWER, reasoning_content: THINKING }, { role: 'user', content: 'And 3+3?' }] });
  assert.equal(answered.usage.input_tokens, answeredChat.usage.prompt_tokens);
  const bad = await server.json('POST', '/v1/responses', { ...base,
    input: [{ type: 'reasoning', summary: [{ type: 'input_text', text: 'x' }] }] });
  assert.equal(bad.status, 400);
  assert.equal(bad.body.error.param, 'input[0].summary[0]');

  // include ["reasoning.encrypted_content"] (what stateless agents ask for, store false): the
  // reasoning item carries its thinking in encrypted_content, which alone brings it back.
  const blob = await client.responses.create({ ...base, tools, store: false,
    include: ['reasoning.encrypted_content'], reasoning: { summary: 'auto' },
    grammar: exactly(`<think>\nUse the tool.\n</think>\n\n${CALL}`) });
  const item = blob.output[0];
  assert.equal(typeof item.encrypted_content, 'string');
  const opaque = { type: 'reasoning', id: item.id, summary: [], encrypted_content: item.encrypted_content };
  const fromBlob = await client.responses.create({ ...base, tools, max_output_tokens: 1,
    input: [{ role: 'user', content: 'What is 2+2?' }, opaque, blob.output[1],
      { type: 'function_call_output', call_id: blob.output[1].call_id, output: '4' }] });
  assert.equal(fromBlob.usage.input_tokens, same.usage.prompt_tokens);
  assert.equal(r.output[0].encrypted_content, undefined, 'only when included');
  // Another server's blob cannot be read: the turn then has no thinking (and no error).
  const foreign = await client.responses.create({ ...base, tools, max_output_tokens: 1,
    input: [{ role: 'user', content: 'What is 2+2?' }, { ...opaque, encrypted_content: 'gAAAAB-opaque' },
      blob.output[1], { type: 'function_call_output', call_id: blob.output[1].call_id, output: '4' }] });
  assert.ok(foreign.usage.input_tokens < same.usage.prompt_tokens);
  const includeBad = await server.json('POST', '/v1/responses', { ...base, include: ['message.input_image.image_url'] });
  assert.equal(includeBad.status, 400);
  assert.equal(includeBad.body.error.param, 'include[0]');

  for (const [reasoning, param] of [[{ effort: 'low' }, 'reasoning.effort'], [{ summary: 'detailed' }, 'reasoning.summary']]) {
    const e = await server.json('POST', '/v1/responses', { ...base, reasoning });
    assert.equal(e.status, 400);
    assert.equal(e.body.error.param, param);
  }
});
