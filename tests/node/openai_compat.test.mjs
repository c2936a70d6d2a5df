// The smaller OpenAI-compatibility points of issue 31, each as a client meets it: `model` left
// out (the served model answers; a wrong name stays a 404), `messages[].name`, text content
// parts joined with "\n" (as llama.cpp and vLLM join them), unknown keys inside
// `response_format` refused, completions `echo` + `logprobs` whose text_offset fits the text,
// batched completion prompts (choices indexed prompt * n + i, as OpenAI indexes them),
// `/tokenize` with add_special false and with_pieces (llama.cpp's shape), and JSON schema
// properties generated in the schema's order rather than sorted.
// Mutations caught (made in the code, seen failing here, reverted): parts joined with ""
// (openai_request.cc ReadContent); the echo offsets without the dummy-prefix correction
// (openai_response.cc LogprobsJson); batched choices indexed without the prompt's p * n
// (openai_routes.cc RespondBatch); the schema dumped from the sorted parse (SchemaGrammar).
import { test, before } from 'node:test';
import assert from 'node:assert/strict';
import { startServer, MODEL } from './server.mjs';

let server, client;
before(async () => {
  server = await startServer(['--parallel', '4']);
  client = server.client();
});

test('model may be left out (the served model answers); an unknown name is a 404', async () => {
  const chat = await server.json('POST', '/v1/chat/completions', { messages: [{ role: 'user', content: 'Hi' }], max_tokens: 2 });
  assert.equal(chat.status, 200, JSON.stringify(chat.body));
  assert.equal(chat.body.model, MODEL);
  const cmpl = await server.json('POST', '/v1/completions', { prompt: 'Hi', max_tokens: 2 });
  assert.equal(cmpl.status, 200);
  assert.equal(cmpl.body.model, MODEL);
  const wrong = await server.json('POST', '/v1/chat/completions', { model: 'gpt-4o', messages: [{ role: 'user', content: 'Hi' }] });
  assert.equal(wrong.status, 404);
  assert.equal(wrong.body.error.code, 'model_not_found');
});

test('messages[].name is accepted (a string)', async () => {
  const r = await client.chat.completions.create({
    model: MODEL, max_tokens: 2, messages: [{ role: 'system', content: 'Be brief.', name: 'sys' }, { role: 'user', content: 'Hi', name: 'bob' }],
  });
  assert.equal(r.choices.length, 1);
  const bad = await server.json('POST', '/v1/chat/completions', { model: MODEL, messages: [{ role: 'user', content: 'Hi', name: 7 }] });
  assert.equal(bad.status, 400);
  assert.equal(bad.body.error.param, 'messages[0].name');
});

test('text content parts are joined with "\\n"', async () => {
  const tokens = async (content) => (await server.json('POST', '/tokenize', { messages: [{ role: 'user', content }] })).body.tokens;
  const parts = await tokens([{ type: 'text', text: 'What is' }, { type: 'text', text: 'the best book' }]);
  assert.deepEqual(parts, await tokens('What is\nthe best book'));
  assert.notDeepEqual(parts, await tokens('What isthe best book'));
});

test('unknown keys inside response_format are a 400 naming them', async () => {
  const cases = [
    [{ type: 'json_object', schema: { type: 'object' } }, 'response_format.schema'],
    [{ type: 'json_schema', json_schema: { name: 'x', schema: { type: 'object' } }, schema: 123 }, 'response_format.schema'],
    [{ type: 'text', strict: true }, 'response_format.strict'],
  ];
  for (const [rf, param] of cases) {
    const r = await server.json('POST', '/v1/chat/completions', { model: MODEL, messages: [{ role: 'user', content: 'Hi' }], response_format: rf });
    assert.equal(r.status, 400, JSON.stringify(rf));
    assert.equal(r.body.error.param, param);
  }
});

test('completions echo + logprobs: text[text_offset[i]:] starts with tokens[i]', async () => {
  for (const prompt of ['Once upon a time there was', ' Lily saw a big dog.']) {
    const r = await client.completions.create({ model: MODEL, prompt, echo: true, logprobs: 1, max_tokens: 6, temperature: 0 });
    const { text } = r.choices[0];
    const { tokens, text_offset: off } = r.choices[0].logprobs;
    assert.ok(text.startsWith(prompt) || text.startsWith(prompt.trimStart()), text);
    assert.equal(tokens.join(''), text);
    for (let i = 0; i < tokens.length; i++) {
      assert.ok(text.slice(off[i]).startsWith(tokens[i]), `${i}: ${JSON.stringify(tokens[i])} at ${off[i]} in ${JSON.stringify(text)}`);
      if (i > 0) assert.ok(off[i] >= off[i - 1]);
    }
  }
});

test('batched completion prompts: choices indexed prompt * n + i, usage summed', async () => {
  const prompts = ['Once upon a time', 'The cat sat'];
  const r = await client.completions.create({ model: MODEL, prompt: prompts, n: 2, max_tokens: 6, temperature: 0 });
  assert.deepEqual(r.choices.map((c) => c.index), [0, 1, 2, 3]);
  let promptTokens = 0;
  for (let p = 0; p < prompts.length; p++) {
    const one = await client.completions.create({ model: MODEL, prompt: prompts[p], max_tokens: 6, temperature: 0 });
    promptTokens += one.usage.prompt_tokens;
    for (const i of [0, 1]) assert.equal(r.choices[p * 2 + i].text, one.choices[0].text, `prompt ${p} choice ${i}`);
  }
  assert.notEqual(r.choices[0].text, r.choices[2].text);
  assert.equal(r.usage.prompt_tokens, promptTokens);
  assert.equal(r.usage.total_tokens, r.usage.prompt_tokens + r.usage.completion_tokens);
  // Token-id prompts batch too; a streamed batch is refused, naming the field.
  const ids = await client.completions.create({ model: MODEL, prompt: [[1, 2, 3], [1, 4]], max_tokens: 2 });
  assert.equal(ids.choices.length, 2);
  const s = await server.json('POST', '/v1/completions', { model: MODEL, prompt: prompts, stream: true });
  assert.equal(s.status, 400);
  assert.equal(s.body.error.param, 'stream');
});

test('/tokenize: add_special false leaves out BOS; with_pieces gives [{id, piece}]', async () => {
  const withBos = (await server.json('POST', '/tokenize', { content: 'Hello world' })).body.tokens;
  const without = (await server.json('POST', '/tokenize', { content: 'Hello world', add_special: false })).body.tokens;
  assert.deepEqual(without, withBos.slice(1));
  assert.ok(withBos.length > without.length);
  const pieces = (await server.json('POST', '/tokenize', { content: 'Hello world', add_special: false, with_pieces: true })).body.tokens;
  assert.deepEqual(pieces.map((p) => p.id), without);
  assert.equal(pieces.map((p) => p.piece).join('').trim(), 'Hello world');
  const bad = await server.json('POST', '/tokenize', { content: 'x', add_special: 'no' });
  assert.equal(bad.status, 400);
});

test('json_schema properties come out in the schema\'s order, not sorted', async () => {
  const schema = {
    type: 'object',
    properties: { zeta: { type: 'boolean' }, alpha: { type: 'integer' }, mid: { enum: ['a', 'b'] } },
    required: ['zeta', 'alpha', 'mid'], additionalProperties: false,
  };
  const r = await client.chat.completions.create({
    model: MODEL, messages: [{ role: 'user', content: 'Hi' }], max_tokens: 100, temperature: 0,
    response_format: { type: 'json_schema', json_schema: { name: 'o', schema, strict: true } },
  });
  assert.equal(r.choices[0].finish_reason, 'stop');
  assert.deepEqual(Object.keys(JSON.parse(r.choices[0].message.content)), ['zeta', 'alpha', 'mid']);
  const g = await server.json('POST', '/v1/chat/completions', {
    model: MODEL, messages: [{ role: 'user', content: 'Hi' }], max_tokens: 100, temperature: 0, guided_json: schema,
  });
  assert.deepEqual(Object.keys(JSON.parse(g.body.choices[0].message.content)), ['zeta', 'alpha', 'mid']);
});
