// LangChain.js's ChatOpenAI (@langchain/openai) pointed at the server, on stories260K with
// Qwen2.5's chat template: withStructuredOutput on zod schemas (method jsonSchema, and
// functionCalling, which forces a tool call) with .int().min().max(), .regex() and .email().max(32)
// (zod sends the e-mail as format + pattern + maxLength), the parsed result re-checked by zod
// itself and by ajv (with ajv-formats) against the JSON schema the client sent; bindTools with a
// forced tool, its call's arguments validated the same way. zod and ajv are not ours.
//
// A reply cut off by max_tokens before the object closes fails: the raw reply's finish_reason must
// be "stop" ("tool_calls" for the forced call), and a parse failure (parsed: null) fails too.
// Mutation caught: maxLength not compiled into string grammars (json_schema_parts.cc): the e-mail's
// local part then runs on to max_tokens and both withStructuredOutput tests fail.
import { test, before } from 'node:test';
import assert from 'node:assert/strict';
import path from 'node:path';
import { ChatOpenAI } from '@langchain/openai';
import { z } from 'zod';
import Ajv from 'ajv';
import addFormats from 'ajv-formats';
import { startServer, MODEL, SHARED } from './server.mjs';

let s;
let llm;
before(async () => {
  s = await startServer(['--chat-template', path.join(SHARED, 'templates', 'Qwen-Qwen2.5-7B-Instruct.jinja')]);
  llm = new ChatOpenAI({
    model: MODEL,
    temperature: 0,
    maxTokens: 300,
    apiKey: 'unused',
    maxRetries: 0,
    configuration: { baseURL: `${s.url}/v1` },
  });
});

const Person = z.object({
  name: z.string().max(12).regex(/^[A-Z][a-z]+$/),
  age: z.number().int().min(1).max(99),
  // Bounded as in schema_keywords.test.mjs's zodResponseFormat test: an unbounded e-mail lets
  // stories260K at temperature 0 loop in the local part until max_tokens.
  email: z.email().max(32),
  pet: z.enum(['dog', 'cat']),
});
const jsonSchema = z.toJSONSchema(Person);
const ajv = addFormats(new Ajv({ strict: false }));

for (const method of ['jsonSchema', 'functionCalling']) {
  test(`withStructuredOutput (${method}): zod's int/min/max/regex/email hold, ajv agrees`, async () => {
    const structured = llm.withStructuredOutput(Person, { method, name: 'person', includeRaw: true });
    const { raw, parsed: value } = await structured.invoke('Tell me about a child and a pet.');
    // The object closed on its own: the reply ended on "stop" ("tool_calls" for the forced
    // call), not "length" (LangChain's parser would throw on most cut replies; this is explicit).
    const finish = raw.response_metadata.finish_reason;
    assert.equal(finish, method === 'jsonSchema' ? 'stop' : 'tool_calls', JSON.stringify(raw));
    assert.ok(value !== null && typeof value === 'object', JSON.stringify(raw));
    // LangChain parsed it with the zod schema already; check again, and with ajv.
    assert.deepEqual(Person.parse(value), value);
    const validate = ajv.compile({ ...jsonSchema, $schema: undefined });
    assert.ok(validate(value), `${JSON.stringify(value)}: ${ajv.errorsText(validate.errors)}`);
  });
}

test('bindTools with a forced tool: the call validates against its zod schema', async () => {
  const weather = {
    name: 'get_weather',
    description: 'The weather in a city',
    schema: z.object({ city: z.string().max(12), days: z.number().int().min(1).max(7) }),
  };
  const bound = llm.bindTools([weather], { tool_choice: { type: 'function', function: { name: 'get_weather' } } });
  const msg = await bound.invoke('What is the weather in Paris?');
  assert.equal(msg.tool_calls.length, 1, JSON.stringify(msg));
  const call = msg.tool_calls[0];
  assert.equal(call.name, 'get_weather');
  assert.match(call.id, /^call_/);
  assert.deepEqual(weather.schema.parse(call.args), call.args);
});
