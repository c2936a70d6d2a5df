// Tool calls through the official OpenAI client, on stories260K with real chat templates of nine
// formats (Qwen2.5: Hermes <tool_call>, Llama 3.1: JSON, Mistral Nemo: [TOOL_CALLS], Functionary
// v3.2: >>>name, v3.1: <function=name>, FireFunction v2: functools[...], Command R+: Action:
// ```json [...], Command R7B: [{"tool_call_id", ...}], DeepSeek R1: <｜tool▁calls▁begin｜>). The model
// never saw a tool call: with tool_choice "required" or a named function the grammar engine makes
// the output one call in the template's format, which must parse into message.tool_calls naming
// an offered tool with arguments valid against its schema; streamed, the client's accumulated
// calls must equal the non-streamed ones (temperature 0). A follow-up turn with the assistant's
// calls and a tool result must render and answer.
import { test, before } from 'node:test';
import assert from 'node:assert/strict';
import path from 'node:path';
import { startServer, MODEL, SHARED } from './server.mjs';

const TEMPLATES = {
  hermes: 'Qwen-Qwen2.5-7B-Instruct.jinja',
  llama3: 'meta-llama-Llama-3.1-8B-Instruct.jinja',
  mistral: 'mistralai-Mistral-Nemo-Instruct-2407.jinja',
  functionary_v3_2: 'meetkai-functionary-medium-v3.2.jinja',
  functionary_v3_1: 'meetkai-functionary-medium-v3.1.jinja',
  firefunction_v2: 'fireworks-ai-llama-3-firefunction-v2.jinja',
  command_r_plus: 'CohereForAI-c4ai-command-r-plus-tool_use.jinja',
  command_r7b: 'CohereForAI-c4ai-command-r7b-12-2024-tool_use.jinja',
  // llama-cpp-deepseek-r1.jinja, which lists the tools, pipes map() into tojson: Jinja2 refuses it.
  deepseek_r1: 'deepseek-ai-DeepSeek-R1-Distill-Qwen-32B.jinja',
};

const LONG = ['firefunction_v2', 'command_r_plus', 'command_r7b'];
// DeepSeek R1's markers are spelled with U+FF5C and U+2581, which stories260K's vocabulary has only
// as byte tokens, and constrained decoding takes no token that ends inside a character: nothing
// can force its calls here. Its follow-up turn renders a given call instead.
const UNFORCEABLE = ['deepseek_r1'];

const tools = [
  {
    type: 'function',
    function: {
      name: 'get_weather',
      description: 'The weather in a city',
      parameters: {
        type: 'object',
        properties: {
          city: { type: 'string', maxLength: 12, description: 'The city' },
          unit: { type: 'string', enum: ['celsius', 'fahrenheit'], description: 'The unit' },
        },
        required: ['city', 'unit'],
      },
    },
  },
  {
    type: 'function',
    function: {
      name: 'search',
      description: 'Search the documents',
      parameters: {
        type: 'object',
        // Command R+'s template writes every parameter's description.
        properties: {
          query: { type: 'string', maxLength: 10, description: 'What to find' },
          limit: { type: 'integer', description: 'At most this many' },
        },
        required: ['query'],
      },
    },
  },
];

// The schema subset above: types, enum, maxLength, required, no other properties.
function validate(schema, v, where = '$') {
  if (schema.enum) assert.ok(schema.enum.includes(v), `${where}: ${v} not in enum`);
  if (schema.type === 'string') {
    assert.equal(typeof v, 'string', where);
    if (schema.maxLength !== undefined) assert.ok([...v].length <= schema.maxLength, where);
  } else if (schema.type === 'integer') {
    assert.ok(Number.isInteger(v), `${where}: ${v} is not an integer`);
  } else if (schema.type === 'object') {
    assert.ok(v && typeof v === 'object' && !Array.isArray(v), where);
    for (const k of schema.required ?? []) assert.ok(k in v, `${where}: missing ${k}`);
    for (const [k, x] of Object.entries(v)) {
      assert.ok(k in schema.properties, `${where}: extra property ${k}`);
      validate(schema.properties[k], x, `${where}.${k}`);
    }
  }
}

function checkCall(format, call, name) {
  const tool = tools.find((t) => t.function.name === call.function.name);
  assert.ok(tool, `unknown tool ${call.function.name}`);
  if (name) assert.equal(call.function.name, name);
  assert.equal(call.type, 'function');
  if (format === 'mistral') assert.match(call.id, /^[a-zA-Z0-9]{9}$/);
  else assert.match(call.id, /^call_[0-9a-f]{24}$/);
  validate(tool.function.parameters, JSON.parse(call.function.arguments));
}

const servers = {};
let plain;
before(async () => {
  for (const [format, file] of Object.entries(TEMPLATES)) {
    // These templates' preambles with the tools take (nearly) all of stories260K's 2,048 tokens.
    const long = LONG.includes(format) ? ['-c', '8192', '--allow-long-context'] : [];
    servers[format] = await startServer(['--chat-template', path.join(SHARED, 'templates', file), ...long]);
  }
  plain = await startServer([]);
});

const ask = [{ role: 'user', content: 'What is the weather in Paris?' }];
const base = { model: MODEL, messages: ask, tools, temperature: 0, max_tokens: 300 };

for (const format of Object.keys(TEMPLATES)) {
  const title = UNFORCEABLE.includes(format)
    ? `${format}: a given call and its result answer a follow-up`
    : `${format}: forced calls parse, stream the same, and answer a follow-up`;
  test(title, async () => {
    const client = servers[format].client();
    const choices = { required: 'required', named: { type: 'function', function: { name: 'search' } } };
    if (UNFORCEABLE.includes(format)) {
      const call = { id: 'call_1', type: 'function', function: { name: 'search', arguments: '{"query": "rain"}' } };
      const plainTurn = await client.chat.completions.create({ ...base, max_tokens: 8 });
      const followUp = await client.chat.completions.create({
        ...base,
        max_tokens: 8,
        messages: [
          ...ask,
          { role: 'assistant', content: null, tool_calls: [call] },
          { role: 'tool', tool_call_id: call.id, content: '{"temperature": 21}' },
        ],
      });
      assert.ok(['stop', 'length', 'tool_calls'].includes(followUp.choices[0].finish_reason));
      assert.ok(followUp.usage.prompt_tokens > plainTurn.usage.prompt_tokens);
      return;
    }
    for (const [kind, tool_choice] of Object.entries(choices)) {
      const name = kind === 'named' ? 'search' : undefined;
      const r = await client.chat.completions.create({ ...base, tool_choice });
      const c = r.choices[0];
      assert.equal(c.finish_reason, 'tool_calls', JSON.stringify(c));
      assert.equal(c.message.content, null);
      assert.equal(c.message.tool_calls.length, 1);
      checkCall(format, c.message.tool_calls[0], name);

      // Streamed: the client's own accumulation of the deltas.
      const stream = client.chat.completions.stream({ ...base, tool_choice });
      const final = await stream.finalChatCompletion();
      const sc = final.choices[0];
      assert.equal(sc.finish_reason, 'tool_calls');
      assert.deepEqual(
        sc.message.tool_calls.map((t) => [t.type, t.function.name, t.function.arguments]),
        c.message.tool_calls.map((t) => [t.type, t.function.name, t.function.arguments]),
      );
      checkCall(format, sc.message.tool_calls[0], name);

      // The call and its result go back to the model, through the template.
      const call = c.message.tool_calls[0];
      const followUp = await client.chat.completions.create({
        ...base,
        max_tokens: 8,
        messages: [
          ...ask,
          { role: 'assistant', content: null, tool_calls: [call] },
          { role: 'tool', tool_call_id: call.id, content: '{"temperature": 21}' },
        ],
      });
      assert.ok(['stop', 'length', 'tool_calls'].includes(followUp.choices[0].finish_reason));
      assert.ok(followUp.usage.prompt_tokens > r.usage.prompt_tokens);
    }
  });

  test(`${format}: auto and none`, async () => {
    const client = servers[format].client();
    const auto = await client.chat.completions.create({ ...base, max_tokens: 24, n: 2, seed: 3, temperature: 1 });
    for (const c of auto.choices) {
      if (c.finish_reason === 'tool_calls') for (const t of c.message.tool_calls) checkCall(format, t);
      else assert.equal(typeof c.message.content, 'string');
    }
    const none = await client.chat.completions.create({ ...base, max_tokens: 8, tool_choice: 'none' });
    assert.equal(none.choices[0].message.tool_calls, undefined);
    assert.equal(typeof none.choices[0].message.content, 'string');
    // With tool_choice none the tools are not rendered: the prompt is the one without tools.
    const without = await client.chat.completions.create({ model: MODEL, messages: ask, max_tokens: 1 });
    assert.equal(none.usage.prompt_tokens, without.usage.prompt_tokens);
    const offered = await client.chat.completions.create({ ...base, max_tokens: 1 });
    // The DeepSeek R1 distills' template does not list the tools (it renders calls and results).
    if (format === 'deepseek_r1') assert.equal(offered.usage.prompt_tokens, without.usage.prompt_tokens);
    else assert.ok(offered.usage.prompt_tokens > without.usage.prompt_tokens);
  });
}

// Functionary v3.2 writes text after "all\n" and then each call after ">>>": the marker is not
// content, streamed or not. guided_choice makes stories260K write exactly that.
test('functionary_v3_2: text and a call, the "all" marker left out', async () => {
  const client = servers.functionary_v3_2.client();
  const text = 'all\nOnce upon a time.\n>>>search\n{"query": "a >>> b", "limit": 2}';
  const body = { ...base, guided_choice: [text] };
  const r = await client.chat.completions.create(body);
  const c = r.choices[0];
  assert.equal(c.finish_reason, 'tool_calls', JSON.stringify(c));
  assert.equal(c.message.content, 'Once upon a time.\n');
  assert.deepEqual(
    c.message.tool_calls.map((t) => [t.function.name, JSON.parse(t.function.arguments)]),
    [['search', { query: 'a >>> b', limit: 2 }]],
  );
  const final = await client.chat.completions.stream(body).finalChatCompletion();
  assert.equal(final.choices[0].message.content, c.message.content);
  const calls = (m) => m.tool_calls.map((t) => [t.type, t.function.name, t.function.arguments]);
  assert.deepEqual(calls(final.choices[0].message), calls(c.message));
  const plainText = await client.chat.completions.create({ ...base, guided_choice: ['all\nHello >> there'] });
  assert.equal(plainText.choices[0].message.content, 'Hello >> there');
  assert.equal(plainText.choices[0].message.tool_calls, undefined);
});

test('auto streams plain text as content when the output is no call', async () => {
  const client = servers.hermes.client();
  const r = await client.chat.completions.create({ ...base, max_tokens: 24 });
  const stream = await client.chat.completions.create({ ...base, max_tokens: 24, stream: true });
  let content = '';
  for await (const chunk of stream) content += chunk.choices[0]?.delta?.content ?? '';
  assert.equal(r.choices[0].finish_reason === 'tool_calls', false, 'stories260K writes no <tool_call> unforced');
  assert.equal(content, r.choices[0].message.content);
});

test('refusals name the field', async () => {
  const check = async (server, body, param) => {
    const res = await server.json('POST', '/v1/chat/completions', { model: MODEL, messages: ask, ...body });
    assert.equal(res.status, 400, JSON.stringify(res.body));
    assert.equal(res.body.error.param, param, JSON.stringify(res.body));
  };
  // No template (stories260K has none): no known format to parse or force.
  await check(plain, { tools }, 'tools');
  const s = servers.hermes;
  await check(s, { tools, tool_choice: { type: 'function', function: { name: 'nope' } } }, 'tool_choice.function.name');
  await check(s, { tool_choice: 'required' }, 'tool_choice');
  await check(s, { tools: [{ type: 'function', function: { name: 'a b' } }] }, 'tools[0].function.name');
  await check(s, { tools: [tools[0], tools[0]] }, 'tools[1].function.name');
  await check(s, { functions: [tools[0].function] }, 'functions');
  await check(s, { function_call: { name: 'get_weather' } }, 'function_call');
  await check(s, { tools, tool_choice: 'required', response_format: { type: 'json_object' } }, 'tool_choice');
  await check(s, {
    tools: [{ type: 'function', function: { name: 'f', parameters: { type: 'object', properties: { n: { type: 'integer', multipleOf: 2 } } } } }],
    tool_choice: 'required',
  }, 'tools[0].function.parameters');
  await check(s, { messages: [...ask, { role: 'tool', content: 'x' }] }, 'messages[1].tool_call_id');
  await check(s, { messages: [{ role: 'user', content: 'x', tool_calls: [{ id: 'a', type: 'function', function: { name: 'f', arguments: '{}' } }] }] }, 'messages[0].tool_calls');
  // tool_choice none with tools is fine even without a known format: nothing is offered.
  const ok = await plain.json('POST', '/v1/chat/completions', { model: MODEL, messages: ask, tools, tool_choice: 'none', max_tokens: 2 });
  assert.equal(ok.status, 200, JSON.stringify(ok.body));
});
