// Structured output through the official OpenAI client: response_format json_schema (several
// schemas, strict) and json_object, llama.cpp's grammar (GBNF) and vLLM's guided_choice, greedy
// and sampled over many seeds. stories260K never saw JSON, so every brace and quote comes from
// the grammar engine's mask. Every schema and grammar here is bounded, so each text must end
// ("stop", never "length") and then parse and validate: json_schema outputs by ajv, GBNF texts
// by a regular expression. Mutations caught: a JSON schema's maxLength/maxItems one higher
// (grammar/json_schema.cc), GBNF's {m} read as {m,m+1} (gbnf_parser.cc), and an object grammar
// whose ':' and ',' are optional (json_object's prefix check).
import { test, before } from 'node:test';
import assert from 'node:assert/strict';
import OpenAI from 'openai';
import Ajv from 'ajv';
import { startServer, MODEL } from './server.mjs';

let server, client;
before(async () => {
  server = await startServer(['--parallel', '4']);
  client = server.client();
});

const messages = [{ role: 'user', content: 'Describe a character.' }];

// The validator is ajv (npm, pinned), not ours: every output must parse and validate.
const ajv = new Ajv({ strict: true, allErrors: true });
function validate(schema, v) {
  const check = ajv.compile(schema);
  assert.ok(check(v), `${JSON.stringify(v)}: ${ajv.errorsText(check.errors)}`);
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
  // Nested through $ref, three levels at most (a recursive schema could nest past any budget).
  tree: {
    $defs: {
      node: {
        type: 'object',
        properties: { leaf: { type: 'boolean' }, kids: { type: 'array', items: { $ref: '#/$defs/twig' }, maxItems: 2 } },
        required: ['leaf', 'kids'], additionalProperties: false,
      },
      twig: {
        type: 'object',
        properties: { leaf: { type: 'boolean' }, kids: { type: 'array', items: { $ref: '#/$defs/leaf' }, maxItems: 2 } },
        required: ['leaf', 'kids'], additionalProperties: false,
      },
      leaf: { type: 'object', properties: { leaf: { const: true } }, required: ['leaf'], additionalProperties: false },
    },
    anyOf: [{ $ref: '#/$defs/node' }, { type: 'null' }],
  },
  // Digits, signs, decimal points and exponents, and enum strings of punctuation.
  numbers: {
    type: 'object',
    properties: {
      id: { type: 'integer' }, ratio: { type: 'number' },
      point: { type: 'array', items: { type: 'number' }, minItems: 2, maxItems: 2 },
      op: { enum: ['a=b', '1+1', 'x<y;'] },
    },
    required: ['id', 'ratio', 'point', 'op'], additionalProperties: false,
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
      // Every schema is bounded (strings, arrays, nesting), so the text must end: a cut text
      // would check nothing.
      for (const c of r.choices) {
        assert.equal(c.finish_reason, 'stop', c.message.content);
        validate(schema, JSON.parse(c.message.content));
      }
    }
  });
}

// Whether `text` is the start of a JSON object, judged by JSON.parse: the open string (if any) is
// closed, a dangling key, colon, comma or partial literal completed by one of a few fillers, and
// the open containers closed. Written here, apart from the grammar engine.
function isJsonObjectPrefix(text) {
  const open = [];
  let inString = false, escaped = false;
  for (const ch of text) {
    if (inString) {
      if (escaped) escaped = false;
      else if (ch === '\\') escaped = true;
      else if (ch === '"') inString = false;
    } else if (ch === '"') inString = true;
    else if (ch === '{' || ch === '[') open.push(ch);
    else if (ch === '}' || ch === ']') open.pop();
  }
  if (!text.startsWith('{')) return false;
  // An escape cut in the middle (\u12) is completed to a whole one.
  const stem = text.replace(/\\u[0-9a-fA-F]{0,3}$/, '').replace(/\\$/, '') + (inString ? '"' : '');
  const closers = open.reverse().map((c) => (c === '{' ? '}' : ']')).join('');
  const fillers = ['', '0', ':0', '"":0', 'rue', 'ue', 'e', 'alse', 'lse', 'se', 'ull', 'll', 'l'];
  return fillers.some((f) => {
    try {
      const v = JSON.parse(stem + f + closers);
      return v !== null && typeof v === 'object' && !Array.isArray(v);
    } catch {
      return false;
    }
  });
}

test('json_object, streamed: the text is a JSON object, or the start of one where it was cut', async () => {
  // json_object bounds nothing, and stories260K never closes the object: after each value it
  // writes another pair (greedy and seeds 1-6 ran to 300 and 1000 tokens alike). So the cut text
  // is checked as a prefix: it must complete to an object (the checker is checked first).
  assert.ok(isJsonObjectPrefix('{ "a" : "b\\"c" , "d'));
  assert.ok(isJsonObjectPrefix('{"a": [1, {"b": nu'));
  assert.ok(!isJsonObjectPrefix('{ "a" : "b" "c'));
  assert.ok(!isJsonObjectPrefix('{ "a" , '));
  assert.ok(!isJsonObjectPrefix('["a"'));
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
    assert.ok(['stop', 'length'].includes(finish), finish);
    if (finish === 'stop') {
      const v = JSON.parse(text);
      assert.ok(v !== null && typeof v === 'object' && !Array.isArray(v), text);
    } else {
      assert.ok(isJsonObjectPrefix(text), text);
    }
  }
});

// Grammars whose text needs what stories260K never writes on its own ("=", digits, brackets,
// colons), each with bounded repetitions so that it must end well within max_tokens; the text is
// checked by a regular expression written here from the grammar's description.
const gbnf = [
  {
    name: 'assignments',
    grammar: 'root ::= line{3}\nline ::= var " = " num ws op ws term ";\\n"\n' +
      'term ::= num | var | "(" num ws op ws var ")"\nop ::= [-+*/%]\nvar ::= [a-z]{1,2}\n' +
      'num ::= [0-9]{1,3}\nws ::= " "?\n',
    text: /^([a-z]{1,2} = \d{1,3} ?[-+*/%] ?(\d{1,3}|[a-z]{1,2}|\(\d{1,3} ?[-+*/%] ?[a-z]{1,2}\));\n){3}$/,
  },
  {
    name: 'log line',
    grammar: 'root ::= date "T" time " " level ":" word{1,4} "!"\n' +
      'date ::= [0-9]{4} "-" [0-1] [0-9] "-" [0-3] [0-9]\ntime ::= [0-2] [0-9] ":" [0-5] [0-9]\n' +
      'level ::= "[" ("INFO" | "WARN" | "E#" [0-9]) "]"\nword ::= " " [a-z]{1,6}\n',
    text: /^\d{4}-[01]\d-[0-3]\dT[0-2]\d:[0-5]\d \[(INFO|WARN|E#\d)\]:( [a-z]{1,6}){1,4}!$/,
  },
];

for (const { name, grammar, text } of gbnf) {
  test(`GBNF grammar (llama.cpp field), ${name}: the text ends and matches`, async () => {
    const runs = [{ temperature: 0 }];
    for (let seed = 1; seed <= 4; seed++) runs.push({ temperature: 1, seed, n: 2 });
    for (const run of runs) {
      const r = await client.completions.create({
        model: MODEL, prompt: 'Once upon a time', max_tokens: 150, grammar, ...run,
      });
      for (const c of r.choices) {
        assert.equal(c.finish_reason, 'stop', JSON.stringify(c.text));
        assert.match(c.text, text);
      }
    }
  });
}

test('guided_choice (vLLM) on completions', async () => {
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
    [{ response_format: { type: 'json_schema', json_schema: { name: 'x', schema: { type: 'string', pattern: '(?=a)' } } } },
      'response_format.json_schema.schema', 'pattern'],
    [{ response_format: { type: 'json_schema', json_schema: { name: 'x', schema: { type: 'object', properties: { a: { type: 'number', multipleOf: 1 } } } } } },
      'response_format.json_schema.schema', 'properties.a.multipleOf'],
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
