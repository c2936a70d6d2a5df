// Ollama's API through the `ollama` npm client (pinned in package-lock), on stories260K with
// Qwen2.5's chat template: /api/chat and /api/generate streamed (NDJSON) and not, the same text
// at temperature 0 both ways and the same as the OpenAI chat route's; done_reason, token counts
// and nanosecond durations; `format` as a JSON schema, whose output ajv validates (a reply cut off
// by num_predict before the object closes fails: done_reason must be "stop" and the text must
// parse); options mapped to sampling (num_predict bounds eval_count, seed is repeatable, unknown
// options are ignored); an earlier tool call and its result rendered as the chat route renders
// them; log-probabilities (logprobs, top_logprobs) equal to the chat route's; the prefix cache
// shared with the other routes; /api/tags, /api/show, /api/ps,
// /api/version; errors as Ollama's {"error": "..."} (the client's ResponseError).
import { test, before } from 'node:test';
import assert from 'node:assert/strict';
import path from 'node:path';
import { Ollama } from 'ollama';
import Ajv from 'ajv';
import { startServer, MODEL, SHARED, STORY } from './server.mjs';

let s;
let ollama;
before(async () => {
  s = await startServer(['--chat-template', path.join(SHARED, 'templates', 'Qwen-Qwen2.5-7B-Instruct.jinja')]);
  ollama = new Ollama({ host: s.url });
});

const messages = [{ role: 'user', content: 'Tell me a story about a dog.' }];

function checkDone(r) {
  assert.equal(r.done, true);
  assert.ok(['stop', 'length'].includes(r.done_reason), r.done_reason);
  assert.equal(r.model, MODEL);
  assert.ok(!Number.isNaN(Date.parse(r.created_at)), r.created_at);
  for (const k of ['total_duration', 'prompt_eval_duration', 'eval_duration']) {
    assert.ok(Number.isInteger(r[k]) && r[k] >= 0, `${k}: ${r[k]}`);
  }
  assert.equal(r.load_duration, 0);
  // Nanoseconds: the whole request takes more than a microsecond, and less than a minute.
  assert.ok(r.total_duration > 1e3 && r.total_duration < 60e9, String(r.total_duration));
  assert.ok(r.total_duration >= r.prompt_eval_duration + r.eval_duration);
  assert.ok(r.prompt_eval_count > 0);
}

test('chat: non-streamed, streamed and the OpenAI chat route agree at temperature 0', async () => {
  const options = { temperature: 0, num_predict: 16 };
  const r = await ollama.chat({ model: MODEL, messages, options, keep_alive: '5m' });
  checkDone(r);
  assert.equal(r.message.role, 'assistant');
  assert.ok(r.message.content.length > 0);
  assert.equal(r.eval_count, 16);
  assert.equal(r.done_reason, 'length');

  const chunks = [];
  for await (const c of await ollama.chat({ model: MODEL, messages, options, stream: true })) chunks.push(c);
  assert.ok(chunks.length > 2, `${chunks.length} chunks`);
  for (const c of chunks.slice(0, -1)) {
    assert.equal(c.done, false);
    assert.equal(c.message.role, 'assistant');
  }
  const last = chunks.at(-1);
  checkDone(last);
  assert.equal(last.eval_count, 16);
  assert.equal(chunks.map((c) => c.message.content).join(''), r.message.content);

  const openai = await s.client().chat.completions.create({ model: MODEL, messages, temperature: 0, max_tokens: 16 });
  assert.equal(openai.choices[0].message.content, r.message.content);
  assert.equal(openai.usage.prompt_tokens, r.prompt_eval_count);
});

test('generate: templated and raw, streamed and not; an empty prompt (or chat) loads', async () => {
  const options = { temperature: 0, num_predict: 12 };
  const r = await ollama.generate({ model: MODEL, prompt: 'Tell me a story about a dog.', options });
  checkDone(r);
  assert.ok(r.response.length > 0);
  // Not raw: the prompt is one user turn through the chat template, as /api/chat's.
  const chat = await ollama.chat({ model: MODEL, messages, options });
  assert.equal(r.response, chat.message.content);
  assert.equal(r.prompt_eval_count, chat.prompt_eval_count);

  const raw = await ollama.generate({ model: MODEL, prompt: 'Once upon a time', raw: true, options });
  checkDone(raw);
  const completion = await s.client().completions.create({ model: MODEL, prompt: 'Once upon a time', temperature: 0, max_tokens: 12 });
  assert.equal(raw.response, completion.choices[0].text);
  assert.equal(raw.prompt_eval_count, completion.usage.prompt_tokens);

  let text = '';
  let last;
  for await (const c of await ollama.generate({ model: MODEL, prompt: 'Once upon a time', raw: true, options, stream: true })) {
    text += c.response;
    last = c;
  }
  checkDone(last);
  assert.equal(text, raw.response);

  const load = await ollama.generate({ model: MODEL, prompt: '' });
  assert.equal(load.done, true);
  assert.equal(load.done_reason, 'load');
  const chatLoad = await ollama.chat({ model: MODEL, messages: [] });
  assert.equal(chatLoad.done_reason, 'load');
});

test('format: a JSON schema constrains the reply, which ajv validates', async () => {
  const schema = {
    type: 'object',
    properties: {
      name: { type: 'string', maxLength: 10 },
      age: { type: 'integer', minimum: 1, maximum: 99 },
      pet: { type: 'string', enum: ['dog', 'cat'] },
    },
    required: ['name', 'age', 'pet'],
    additionalProperties: false,
  };
  const validate = new Ajv({ strict: false }).compile(schema);
  for (const stream of [false, true]) {
    let content = '';
    let done;
    const options = { temperature: 0, num_predict: 200 };
    if (stream) {
      for await (const c of await ollama.chat({ model: MODEL, messages, format: schema, options, stream })) {
        content += c.message.content;
        done = c;
      }
    } else {
      done = await ollama.chat({ model: MODEL, messages, format: schema, options });
      content = done.message.content;
    }
    // Cut off before the object closes would be "length": the test fails rather than pass.
    assert.equal(done.done_reason, 'stop', content);
    const value = JSON.parse(content);
    assert.ok(validate(value), `${content}: ${JSON.stringify(validate.errors)}`);
  }
  // "json" is any JSON object: stories260K then writes keys that never end (num_predict cuts them),
  // so only its start is checked here; without the grammar this model's text starts with a word.
  const json = await ollama.generate({ model: MODEL, prompt: 'A dog', format: 'json', options: { temperature: 0, num_predict: 8 } });
  assert.match(json.response, /^\s*\{\s*"/);
  const free = await ollama.generate({ model: MODEL, prompt: 'A dog', options: { temperature: 0, num_predict: 8 } });
  assert.doesNotMatch(free.response, /^\s*\{/);
});

test('options: num_predict bounds, seed repeats, stop ends, unknown options are ignored', async () => {
  const base = { model: MODEL, prompt: 'Once upon a time', raw: true };
  const a = await ollama.generate({ ...base, options: { temperature: 1, seed: 7, num_predict: 10, num_ctx: 4096, mirostat: 0 } });
  const b = await ollama.generate({ ...base, options: { temperature: 1, seed: 7, num_predict: 10 } });
  assert.equal(a.eval_count, 10);
  assert.equal(a.response, b.response);
  const greedy = await ollama.generate({ ...base, options: { temperature: 0, num_predict: 24 } });
  const word = greedy.response.trim().split(/\s+/)[2];
  const stopped = await ollama.generate({ ...base, options: { temperature: 0, num_predict: 24, stop: [word] } });
  assert.equal(stopped.done_reason, 'stop');
  assert.ok(!stopped.response.includes(word), `${stopped.response} has ${word}`);
  assert.ok(greedy.response.startsWith(stopped.response));
});

// logprobs / top_logprobs (Ollama's API, the client's fields): per generated token its
// text, bytes and log-probability, the alternatives best first; streamed, each line carries
// its tokens' entries. The values are the OpenAI chat route's for the same request (which
// logprob_values.test.mjs checks against a log-softmax of the model's logits).
test('logprobs: per token, with alternatives, streamed and not, as the chat route reports them', async () => {
  const options = { temperature: 0, num_predict: 12 };
  const r = await ollama.chat({ model: MODEL, messages, options, logprobs: true, top_logprobs: 3 });
  assert.equal(r.logprobs.length, 12);
  assert.equal(r.logprobs.map((t) => t.token).join(''), r.message.content);
  for (const t of r.logprobs) {
    assert.deepEqual(t.bytes, [...Buffer.from(t.token)]);
    assert.equal(t.top_logprobs.length, 3);
    // Greedy: the token generated is the most likely one.
    assert.equal(t.top_logprobs[0].token, t.token);
    assert.equal(t.top_logprobs[0].logprob, t.logprob);
    assert.ok(t.top_logprobs[1].logprob <= t.top_logprobs[0].logprob);
    assert.ok(t.logprob <= 0);
  }
  const openai = await s.client().chat.completions.create({
    model: MODEL, messages, temperature: 0, max_tokens: 12, logprobs: true, top_logprobs: 3,
  });
  const want = openai.choices[0].logprobs.content;
  assert.deepEqual(r.logprobs.map((t) => [t.token, t.logprob]), want.map((t) => [t.token, t.logprob]));
  assert.deepEqual(r.logprobs.map((t) => t.top_logprobs.map((a) => a.logprob)),
    want.map((t) => t.top_logprobs.map((a) => a.logprob)));

  const streamed = [];
  for await (const c of await ollama.chat({ model: MODEL, messages, options, stream: true, logprobs: true })) {
    streamed.push(...(c.logprobs ?? []));
  }
  assert.deepEqual(streamed.map((t) => [t.token, t.logprob]), r.logprobs.map((t) => [t.token, t.logprob]));
  assert.ok(streamed.every((t) => t.top_logprobs === undefined), 'no alternatives unless asked');

  const g = await ollama.generate({ model: MODEL, prompt: 'Once upon a time', raw: true, options, logprobs: true });
  assert.equal(g.logprobs.map((t) => t.token).join(''), g.response);
  // Without logprobs: no field; top_logprobs alone asks for nothing, as Ollama; over 20 is a 400.
  assert.equal((await ollama.chat({ model: MODEL, messages, options, top_logprobs: 2 })).logprobs, undefined);
  await assert.rejects(ollama.chat({ model: MODEL, messages, options, logprobs: true, top_logprobs: 21 }),
    (e) => e.status_code === 400 && /top_logprobs/.test(e.message));
});

test('the prefix cache is shared with the OpenAI routes', async () => {
  const long = [{ role: 'system', content: STORY }, { role: 'user', content: 'And then?' }];
  await s.client().chat.completions.create({ model: MODEL, messages: long, max_tokens: 1 });
  const before = await s.metrics();
  await ollama.chat({ model: MODEL, messages: long, options: { num_predict: 1 } });
  const after = await s.metrics();
  const key = Object.keys(after).find((k) => k.startsWith('promptcache_cached_tokens_total'));
  assert.ok(key, Object.keys(after).join(' '));
  assert.ok(after[key] - (before[key] ?? 0) >= 256, `${before[key]} -> ${after[key]}`);
});

test('tools: an earlier call and its result render as the chat route renders them', async () => {
  const tools = [{ type: 'function', function: { name: 'get_weather', description: 'The weather', parameters: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] } } }];
  const conversation = [
    { role: 'user', content: 'Weather in Paris?' },
    { role: 'assistant', content: '', tool_calls: [{ function: { name: 'get_weather', arguments: { city: 'Paris' } } }] },
    { role: 'tool', tool_name: 'get_weather', content: 'Sunny, 21 degrees' },
  ];
  const r = await ollama.chat({ model: MODEL, messages: conversation, tools, options: { temperature: 0, num_predict: 4 } });
  checkDone(r);
  const chat = await s.json('POST', '/v1/chat/completions', {
    model: MODEL, max_tokens: 1, tools,
    messages: [
      conversation[0],
      { role: 'assistant', content: null, tool_calls: [{ id: 'call_0', type: 'function', function: { name: 'get_weather', arguments: '{"city":"Paris"}' } }] },
      { role: 'tool', tool_call_id: 'call_0', content: 'Sunny, 21 degrees' },
    ],
  });
  assert.equal(chat.status, 200, chat.text);
  assert.equal(r.prompt_eval_count, chat.body.usage.prompt_tokens);
  const shorter = await ollama.chat({ model: MODEL, messages: conversation.slice(0, 2).concat([{ ...conversation[2], content: 'Sunny' }]), tools, options: { num_predict: 1 } });
  assert.ok(shorter.prompt_eval_count < r.prompt_eval_count);
});

test('tags, show, ps, version', async () => {
  const list = await ollama.list();
  assert.equal(list.models.length, 1);
  assert.equal(list.models[0].name, MODEL);
  assert.equal(list.models[0].details.format, 'gguf');
  assert.equal(list.models[0].details.family, 'llama');
  const show = await ollama.show({ model: MODEL });
  assert.deepEqual(show.capabilities, ['completion', 'tools']);
  assert.equal(show.model_info['general.architecture'], 'llama');
  assert.equal(show.model_info['llama.context_length'], 2048);
  const ps = await ollama.ps();
  assert.equal(ps.models[0].name, MODEL);
  assert.equal(ps.models[0].context_length, 2048);
  const v = await ollama.version();
  assert.match(v.version, /^\d+\.\d+\.\d+/);
});

test('errors are Ollama\'s {"error": "..."}', async () => {
  const refused = async (promise, status, pattern) => {
    await assert.rejects(promise, (e) => {
      assert.equal(e.name, 'ResponseError', `${e.name}: ${e.message}`);
      assert.equal(e.status_code, status);
      assert.match(e.error, pattern);
      return true;
    });
  };
  await refused(ollama.chat({ model: 'nope', messages }), 404, /nope/);
  await refused(ollama.show({ model: 'nope' }), 404, /nope/);
  await refused(ollama.chat({ model: MODEL, messages, options: { temperature: -1 } }), 400, /temperature/);
  await refused(ollama.chat({ model: MODEL, messages, format: 'yaml' }), 400, /format/);
  await refused(ollama.generate({ model: MODEL, prompt: 'x', images: ['AAAA'] }), 400, /images/);
  const raw = await s.json('POST', '/api/chat', { model: MODEL, messages: 'hi' });
  assert.equal(raw.status, 400);
  assert.deepEqual(Object.keys(raw.body), ['error']);
  assert.equal(typeof raw.body.error, 'string');
});
