// Structured output through the official OpenAI client: response_format json_schema (several
// schemas, strict) and json_object, llama.cpp's grammar (GBNF) and vLLM's guided_choice, greedy
// and sampled over many seeds. stories260K never saw JSON, so every brace and quote comes from
// the grammar engine's mask; the text must always parse and validate against its schema.
import { test, before } from 'node:test';
import assert from 'node:assert/strict';
import OpenAI from 'openai';
import { startServer, MODEL } from './server.mjs';

let server, client;
before(async () => {
  server = await startServer(['--parallel', '4']);
  client = server.client();
});

const messages = [{ role: 'user', content: 'Describe a character.' }];

// The subset of JSON Schema the schemas below use.
function validate(schema, v, defs = schema.$defs ?? {}, path = '$') {
  if (schema.$ref) return validate(defs[schema.$ref.split('/').pop()], v, defs, path);
  if (schema.anyOf) {
    const errs = schema.anyOf.map((s) => { try { validate(s, v, defs, path); return null; } catch (e) { return e; } });
    if (errs.every((e) => e)) throw new Error(`${path}: matches no anyOf branch`);
    return;
  }
  if ('const' in schema) assert.deepEqual(v, schema.const, path);
  if (schema.enum) assert.ok(schema.enum.some((x) => JSON.stringify(x) === JSON.stringify(v)), `${path}: ${v}`);
  const types = schema.type ? [].concat(schema.type) : null;
  if (types) {
    const t = v === null ? 'null' : Array.isArray(v) ? 'array' : Number.isInteger(v) && types.includes('integer') ? 'integer' : typeof v;
    assert.ok(types.includes(t) || (t === 'integer' && types.includes('number')), `${path}: ${t} not in ${types}`);
  }
  if (typeof v === 'string') {
    if (schema.maxLength !== undefined) assert.ok([...v].length <= schema.maxLength, path);
    if (schema.minLength !== undefined) assert.ok([...v].length >= schema.minLength, path);
  }
  if (Array.isArray(v)) {
    if (schema.maxItems !== undefined) assert.ok(v.length <= schema.maxItems, path);
    if (schema.minItems !== undefined) assert.ok(v.length >= schema.minItems, path);
    v.forEach((x, i) => schema.items && validate(schema.items, x, defs, `${path}[${i}]`));
  } else if (v !== null && typeof v === 'object') {
    for (const k of schema.required ?? []) assert.ok(k in v, `${path}: missing ${k}`);
    for (const [k, x] of Object.entries(v)) {
      assert.ok(schema.properties && k in schema.properties, `${path}: extra ${k}`);
      validate(schema.properties[k], x, defs, `${path}.${k}`);
    }
  }
}

const schemas = {
  person: {
    type: 'object',
    properties: {
      name: { type: 'string', maxLength: 8 }, age: { type: 'integer' },
      mood: { enum: ['happy', 'sad', 'calm'] }, height: { type: 'number' },
      pets: { type: 'array', items: { type: 'string', maxLength: 5 }, maxItems: 2 },
    },
    required: ['name', 'age', 'mood', 'height', 'pets'], additionalProperties: false,
  },
  tree: {
    $defs: {
      node: {
        type: 'object',
        properties: { leaf: { type: 'boolean' }, kids: { type: 'array', items: { $ref: '#/$defs/node' }, maxItems: 2 } },
        required: ['leaf', 'kids'], additionalProperties: false,
      },
    },
    anyOf: [{ $ref: '#/$defs/node' }, { type: 'null' }],
  },
  choice: {
    type: 'object',
    properties: { answer: { anyOf: [{ const: 42 }, { type: 'string', maxLength: 3 }, { type: 'null' }] },
      flags: { type: 'array', items: { type: 'boolean' }, minItems: 1, maxItems: 3 } },
    required: ['answer', 'flags'], additionalProperties: false,
  },
};

for (const [name, schema] of Object.entries(schemas)) {
  test(`response_format json_schema (${name}): always valid, greedy and sampled`, async () => {
    const runs = [{ temperature: 0 }];
    for (let seed = 1; seed <= 6; seed++) runs.push({ temperature: 1, seed, n: 2 });
    for (const run of runs) {
      const r = await client.chat.completions.create({
        model: MODEL, messages, max_tokens: 600, ...run,
        response_format: { type: 'json_schema', json_schema: { name, schema, strict: true } },
      });
      for (const c of r.choices) {
        // The recursive schema may nest past any budget: a cut is fine, a wrong text is not.
        if (name === 'tree' && c.finish_reason === 'length') continue;
        assert.equal(c.finish_reason, 'stop', c.message.content);
        validate(schema, JSON.parse(c.message.content));
      }
    }
  });
}

test('json_object, streamed: the text is a JSON object', async () => {
  // Strings are free here: a story model may write one past the budget (then the text is cut).
  for (let seed = 1; seed <= 4; seed++) {
    const stream = await client.chat.completions.create({
      model: MODEL, messages, max_tokens: 300, temperature: 1, seed, stream: true,
      response_format: { type: 'json_object' },
    });
    let text = '', finish = null;
    for await (const chunk of stream) {
      text += chunk.choices[0]?.delta?.content ?? '';
      finish = chunk.choices[0]?.finish_reason ?? finish;
    }
    assert.ok(text.startsWith('{'), text);
    if (finish === 'stop') {
      const v = JSON.parse(text);
      assert.ok(v !== null && typeof v === 'object' && !Array.isArray(v), text);
    }
  }
});

test('GBNF grammar (llama.cpp field) and guided_choice (vLLM) on completions', async () => {
  const grammar = 'root ::= (expr "=" ws term "\\n"){2}\nexpr ::= term ([-+*/] term)*\n' +
    'term ::= [a-z]{1,3} ws | [0-9]{1,3} ws | "(" ws expr ")" ws\nws ::= " "?\n';
  for (let seed = 1; seed <= 4; seed++) {
    const r = await client.completions.create({
      model: MODEL, prompt: 'Once upon a time', max_tokens: 200, temperature: 1, seed, grammar,
    });
    const c = r.choices[0];
    if (c.finish_reason === 'length') continue;  // nested parentheses may run long
    assert.equal(c.finish_reason, 'stop');
    const lines = c.text.split('\n');
    assert.equal(lines.length, 3, c.text);
    for (const line of lines.slice(0, 2)) assert.match(line, /^[-+*/()a-z0-9 ]+= ?[a-z0-9]+ ?$/, c.text);
  }
  const r = await client.completions.create({
    model: MODEL, prompt: 'Once upon a time', max_tokens: 20, n: 4, seed: 3,
    guided_choice: ['there was a dog', 'a cat said "hi"'],
  });
  for (const c of r.choices) {
    assert.ok(['there was a dog', 'a cat said "hi"'].includes(c.text), c.text);
    assert.equal(c.finish_reason, 'stop');
  }
});

test('unsupported schema keywords and bad grammars are 400s naming them', async () => {
  const bad = [
    [{ response_format: { type: 'json_schema', json_schema: { name: 'x', schema: { type: 'string', pattern: 'a+' } } } },
      'response_format.json_schema.schema', 'pattern'],
    [{ response_format: { type: 'json_schema', json_schema: { name: 'x', schema: { type: 'object', properties: { a: { type: 'number', minimum: 1 } } } } } },
      'response_format.json_schema.schema', 'properties.a.minimum'],
    [{ grammar: 'root ::= foo' }, 'grammar', 'foo'],
    [{ grammar: 'root ::= root "a"' }, 'grammar', 'left-recursive'],
    [{ grammar: 'root ::= "a"', guided_json: {} }, 'guided_json', 'give one'],
  ];
  for (const [extra, param, mention] of bad) {
    await assert.rejects(
      client.chat.completions.create({ model: MODEL, messages, max_tokens: 4, ...extra }),
      (e) => e instanceof OpenAI.BadRequestError && e.param === param && e.message.includes(mention),
      JSON.stringify(extra));
  }
});
