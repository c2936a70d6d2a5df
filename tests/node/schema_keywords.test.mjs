// JSON Schema keywords as the clients people build with write them: zod 4 and zod 3 schemas
// through the openai client's zodResponseFormat / zodFunction (strict), zod 4's own
// toJSONSchema with optional fields (as the AI SDK's generateObject sends), and a corpus of
// schemas as pydantic 2 writes them ($defs, titles, descriptions, Optional as anyOf with null,
// enums, dates, a discriminated union). stories260K never saw JSON: every character of every
// output comes through the grammar engine's mask, greedy and sampled over several seeds. Each
// output must end ("stop": every schema here is bounded, so a cut text fails rather than
// checking nothing), parse, and validate with ajv + ajv-formats (npm, pinned; not ours), and
// for zod 4 schemas also with zod's own safeParse. Mutation caught: ^ and $ compiled as no-ops
// (regex_parse.cc): the model then wrote prose into date, email and regex fields and ran to
// "length" in 6 of the 7 tests.
import { test, before } from 'node:test';
import assert from 'node:assert/strict';
import path from 'node:path';
import OpenAI from 'openai';
import Ajv from 'ajv';
import Ajv2020 from 'ajv/dist/2020.js';
import addFormats from 'ajv-formats';
import { z } from 'zod';
import * as z3 from 'zod/v3';
import { zodResponseFormat, zodFunction } from 'openai/helpers/zod';
import { startServer, MODEL, SHARED } from './server.mjs';

let server, hermes;
before(async () => {
  server = await startServer(['--parallel', '4']);
  hermes = await startServer(['--chat-template', path.join(SHARED, 'templates', 'Qwen-Qwen2.5-7B-Instruct.jinja')]);
});

// ajv in its full-format mode; draft 2020-12 where the schema says so (zod 4's default target).
function validator(schema) {
  const AjvClass = String(schema.$schema ?? '').includes('2020-12') ? Ajv2020 : Ajv;
  // strict: false only because pydantic writes OpenAPI's `discriminator` annotation.
  const ajv = new AjvClass({ strict: false, allErrors: true });
  addFormats(ajv);
  const check = ajv.compile(schema);
  return (v) => assert.ok(check(v), `${JSON.stringify(v)}: ${ajv.errorsText(check.errors)}`);
}

const messages = [{ role: 'user', content: 'Describe a character.' }];
const runs = [{ temperature: 0 }];
for (let seed = 1; seed <= 4; seed++) runs.push({ temperature: 1, seed, n: 2 });

// Every output of every run: stopped, parsed, valid for ajv (and zod where given). The checkers
// are checked first on a value they must refuse.
async function generate(name, schema, { zodSchema, refuse, strict = true, client } = {}) {
  const check = validator(schema);
  assert.throws(() => check(refuse), undefined, `ajv accepted ${JSON.stringify(refuse)}`);
  if (zodSchema) assert.ok(!zodSchema.safeParse(refuse).success);
  const outputs = [];
  for (const run of runs) {
    const r = await (client ?? server.client()).chat.completions.create({
      model: MODEL, messages, max_tokens: 1500, ...run,
      response_format: { type: 'json_schema', json_schema: { name, schema, strict } },
    });
    for (const c of r.choices) {
      assert.equal(c.finish_reason, 'stop', c.message.content);
      const v = JSON.parse(c.message.content);
      check(v);
      if (zodSchema) {
        const p = zodSchema.safeParse(v);
        assert.ok(p.success, `${c.message.content}: ${p.error?.message}`);
      }
      outputs.push(v);
    }
  }
  return outputs;
}

test('zod 4 through zodResponseFormat: int ranges, email, regex, lengths, enums, nullable', async () => {
  const account = z.object({
    name: z.string().min(1).max(12),
    age: z.number().int().min(18).max(99),
    email: z.email().max(32),
    code: z.string().regex(/^[A-Z]{2}-\d{3}$/),
    tags: z.array(z.string().min(1).max(6)).min(1).max(3),
    role: z.enum(['admin', 'user', 'guest']),
    score: z.number().gt(0).lt(1),
    nickname: z.string().max(8).nullable(),
  });
  const { schema } = zodResponseFormat(account, 'account').json_schema;
  const out = await generate('account', schema, {
    zodSchema: account,
    refuse: { name: 'a', age: 17, email: 'x@y.co', code: 'AB-123', tags: ['t'], role: 'user', score: 0.5, nickname: null },
  });
  // The bounds were reached for, not dodged: the ages are integers within 18..99.
  assert.ok(out.every((v) => Number.isInteger(v.age) && v.age >= 18 && v.age <= 99));
});

test('zod 4 through zodResponseFormat: uuid, date, date-time, ipv4, ipv6, url, 64-bit ints, decimals', async () => {
  const event = z.object({
    id: z.uuid(),
    day: z.iso.date(),
    at: z.iso.datetime().max(32),
    ip: z.ipv4(),
    ip6: z.ipv6(),
    site: z.url().max(40),
    seq: z.number().int().min(-5000000000).max(5000000000),
    total: z.int(),
    ratio: z.number().min(-1.5).max(2.25),
    kind: z.discriminatedUnion('k', [z.object({ k: z.literal('a') }), z.object({ k: z.literal('b'), v: z.string().max(3) })]),
  });
  const { schema } = zodResponseFormat(event, 'event').json_schema;
  await generate('event', schema, {
    // zod's url() also asks the WHATWG URL parser, which is not JSON Schema's `uri`: ajv judges.
    refuse: { id: 'x', day: '2023-02-29', at: '2024-01-01T00:00:00Z', ip: '1.2.3.4', ip6: '::', site: 'a:', seq: 0, total: 0, ratio: 0, kind: { k: 'a' } },
  });
});

test('zod 3 through zodResponseFormat: email, datetime, uuid, ip (anyOf formats), ranges, arrays', async () => {
  const y = z3.z;
  const profile = y.object({
    handle: y.string().regex(/^@[a-z]{2,8}$/),
    email: y.string().email().max(30),
    joined: y.string().datetime().max(30),
    id: y.string().uuid(),
    addr: y.string().ip(),
    level: y.number().int().min(1).max(5),
    weight: y.number().positive().max(500),
    colors: y.array(y.enum(['red', 'green', 'blue'])).min(1).max(2),
    note: y.string().max(10).optional().nullable(),
  });
  const { schema } = zodResponseFormat(profile, 'profile').json_schema;
  // zod 3's datetime() takes no offset but its JSON Schema says only date-time: ajv judges.
  await generate('profile', schema, {
    refuse: { handle: '@ab', email: 'a@b.co', joined: '2024-01-01T00:00:00Z', id: '123e4567-e89b-12d3-a456-426614174000', addr: '1.2.3.4', level: 6, weight: 1, colors: ['red'], note: null },
  });
});

test('zod 4 toJSONSchema with optional fields (as the AI SDK sends it), draft 2020-12', async () => {
  const task = z.object({
    title: z.string().min(3).max(16),
    priority: z.int().min(1).max(3),
    due: z.iso.date().optional(),
    done: z.boolean().optional(),
    steps: z.array(z.object({ n: z.int().min(0).max(9), what: z.string().max(8) })).max(2).optional(),
    pair: z.tuple([z.string().max(4), z.int().min(0).max(9)]),
  });
  const schema = z.toJSONSchema(task);
  await generate('task', schema, { zodSchema: task, strict: false, refuse: { title: 'abc', priority: 4, pair: ['a', 1] } });
});

// As pydantic 2 writes them (model_json_schema()): titles, $defs, Optional[...] as anyOf with
// null and a default, enums by reference, constr/conint bounds, dates, a discriminated union.
const pydantic = {
  $defs: {
    Address: {
      properties: {
        street: { maxLength: 20, minLength: 1, title: 'Street', type: 'string' },
        zip: { pattern: '^\\d{5}$', title: 'Zip', type: 'string' },
      },
      required: ['street', 'zip'], title: 'Address', type: 'object',
    },
    Cat: {
      properties: { pet_type: { const: 'cat', title: 'Pet Type', type: 'string' }, lives: { maximum: 9, minimum: 1, title: 'Lives', type: 'integer' } },
      required: ['pet_type', 'lives'], title: 'Cat', type: 'object',
    },
    Dog: {
      properties: { pet_type: { const: 'dog', title: 'Pet Type', type: 'string' }, bark: { maxLength: 5, title: 'Bark', type: 'string' } },
      required: ['pet_type', 'bark'], title: 'Dog', type: 'object',
    },
    Status: { enum: ['active', 'inactive', 'banned'], title: 'Status', type: 'string' },
  },
  description: 'A user of the shop.',
  properties: {
    name: { maxLength: 10, minLength: 1, title: 'Name', type: 'string' },
    age: { exclusiveMinimum: 0, maximum: 150, title: 'Age', type: 'integer' },
    birthday: { format: 'date', title: 'Birthday', type: 'string' },
    status: { $ref: '#/$defs/Status' },
    address: { anyOf: [{ $ref: '#/$defs/Address' }, { type: 'null' }], default: null },
    nick: { anyOf: [{ maxLength: 8, type: 'string' }, { type: 'null' }], default: null, title: 'Nick' },
    scores: { items: { maximum: 10, minimum: 0, type: 'number' }, maxItems: 3, title: 'Scores', type: 'array' },
    pet: {
      discriminator: { mapping: { cat: '#/$defs/Cat', dog: '#/$defs/Dog' }, propertyName: 'pet_type' },
      oneOf: [{ $ref: '#/$defs/Cat' }, { $ref: '#/$defs/Dog' }], title: 'Pet',
    },
    created: { format: 'date-time', maxLength: 30, title: 'Created', type: 'string' },
  },
  required: ['name', 'age', 'birthday', 'status', 'pet', 'created'],
  title: 'User', type: 'object',
};

test('a pydantic 2 schema: $defs, Optional, enums, bounds, dates, a discriminated union', async () => {
  await generate('user', pydantic, {
    strict: false,
    refuse: { name: 'a', age: 0, birthday: '2024-01-01', status: 'active', pet: { pet_type: 'cat', lives: 1 }, created: '2024-01-01T00:00:00Z' },
  });
});

test('tool parameters from zodFunction: forced calls valid against the bounds', async () => {
  const book = zodFunction({
    name: 'book',
    parameters: z.object({ guests: z.int().min(1).max(8), day: z.iso.date(), email: z.email().max(24), room: z.enum(['single', 'double']) }),
  });
  const check = validator(book.function.parameters);
  for (const run of runs.slice(0, 3)) {
    const r = await hermes.client().chat.completions.create({
      model: MODEL, messages: [{ role: 'user', content: 'Book a room.' }], tools: [book],
      tool_choice: 'required', max_tokens: 400, ...run,
    });
    for (const c of r.choices) {
      assert.equal(c.finish_reason, 'tool_calls', JSON.stringify(c.message));
      check(JSON.parse(c.message.tool_calls[0].function.arguments));
    }
  }
});

test('keywords that cannot be enforced are 400s naming them', async () => {
  const bad = [
    [{ type: 'string', pattern: '(a)\\1' }, 'back-reference'],
    [{ type: 'string', pattern: '^(?!x)' }, 'negative lookahead'],
    [{ type: 'number', multipleOf: 0.5 }, 'multipleOf'],
    [{ type: 'string', format: 'color' }, "format 'color'"],
    // zod 4's hostname() and iso.duration() carry lookaheads in their patterns.
    [zodResponseFormat(z.object({ h: z.hostname() }), 'h').json_schema.schema, 'lookahead'],
    [{ oneOf: [{ type: 'number' }, { type: 'integer' }] }, 'may both match'],
  ];
  for (const [schema, mention] of bad) {
    await assert.rejects(
      server.client().chat.completions.create({
        model: MODEL, messages, max_tokens: 4,
        response_format: { type: 'json_schema', json_schema: { name: 'x', schema } },
      }),
      (e) => e instanceof OpenAI.BadRequestError && e.param === 'response_format.json_schema.schema' && e.message.includes(mention),
      mention);
  }
});
