// The AI SDK (`ai`) through @ai-sdk/openai-compatible, the provider people use for any
// OpenAI-style server: it speaks the chat completions route (POST /v1/chat/completions), not the
// Responses API that @ai-sdk/openai defaults to (responses.test.mjs covers that one). stories260K
// with Qwen2.5's template (Hermes tool calls). Asserted: generateText's text, finish reason and
// usage, and the cached prompt tokens the provider reads from prompt_tokens_details on a repeated
// prompt; streamText adding up to the same text and usage at temperature 0; generateObject on a
// zod schema with .int().min().max() and .regex(), which must finish on "stop" (an object cut by
// max_tokens fails) and validate with zod and with ajv; a tool call forced by toolChoice, its
// input validated by ajv.
// The provider sends a json_schema response_format only with supportsStructuredOutputs: true
// (without it, it sends json_object and drops the schema with a warning), and a final usage chunk
// in streams only with includeUsage: true; both are the provider's documented options.
// Mutations caught (each made in the code, seen failing here, reverted): finish_reason not set to
// "tool_calls" in CompletionBody (the forced call ends "stop") and in StreamFinishChunk (the
// streamed one does); prompt_tokens_details.cached_tokens always 0 (cacheReadTokens 0, not the
// prompt's whole blocks); a string's `pattern` left out of the grammar (generateObject's name
// fails zod's regex).
import { test, before } from 'node:test';
import assert from 'node:assert/strict';
import path from 'node:path';
import Ajv from 'ajv';
import { z } from 'zod';
import { createOpenAICompatible } from '@ai-sdk/openai-compatible';
import { generateText, streamText, generateObject, tool, jsonSchema } from 'ai';
import { startServer, MODEL, SHARED, STORY, expectedCached } from './server.mjs';

let server, model;
const ajv = new Ajv({ strict: false });
before(async () => {
  server = await startServer(['--chat-template', path.join(SHARED, 'templates', 'Qwen-Qwen2.5-7B-Instruct.jinja')]);
  const provider = createOpenAICompatible({
    name: 'promptcache', baseURL: `${server.url}/v1`, apiKey: 'unused',
    supportsStructuredOutputs: true, includeUsage: true,
  });
  model = provider.chatModel(MODEL);
});

test('generateText: text, finish reason, usage; a repeated prompt reads its blocks from the cache', async () => {
  const g = await generateText({ model, prompt: 'Once upon a time', maxOutputTokens: 16, temperature: 0 });
  assert.ok(g.text.length > 0);
  assert.ok(['stop', 'length'].includes(g.finishReason), g.finishReason);
  assert.equal(g.finishReason === 'length', g.usage.outputTokens === 16);
  assert.ok(g.usage.inputTokens > 0 && g.usage.outputTokens > 0 && g.usage.outputTokens <= 16);
  assert.equal(g.usage.totalTokens, g.usage.inputTokens + g.usage.outputTokens);
  assert.match(g.response.id, /^chatcmpl-/);
  assert.equal(g.response.modelId, MODEL);

  // A prompt of about 300 tokens, asked twice: the second reuses all its whole blocks, and the
  // provider reports them as cacheReadTokens (from usage.prompt_tokens_details.cached_tokens).
  const prompt = `Cache check. ${STORY}`;
  const first = await generateText({ model, prompt, maxOutputTokens: 4, temperature: 0 });
  const second = await generateText({ model, prompt, maxOutputTokens: 4, temperature: 0 });
  const n = first.usage.inputTokens;
  assert.ok(n > 100, `${n}`);
  assert.equal(second.usage.inputTokens, n);
  // The first time only the template's system preamble, shared with the request above, is cached.
  assert.ok(first.usage.inputTokenDetails.cacheReadTokens < 100, JSON.stringify(first.usage));
  assert.equal(second.usage.inputTokenDetails.cacheReadTokens, expectedCached(n, n), JSON.stringify(second.usage));
  assert.equal(second.usage.inputTokenDetails.noCacheTokens, n - expectedCached(n, n));
  assert.equal(second.text, first.text);
});

test('streamText: the streamed text and usage equal the non-streamed at temperature 0', async () => {
  const body = { model, prompt: 'Lily saw a dog.', maxOutputTokens: 24, temperature: 0 };
  const g = await generateText(body);
  const s = streamText(body);
  let streamed = '';
  let pieces = 0;
  for await (const piece of s.textStream) {
    streamed += piece;
    pieces++;
  }
  assert.ok(pieces > 1, `${pieces} pieces`);  // it did stream
  assert.equal(streamed, g.text);
  assert.equal(await s.finishReason, g.finishReason);
  const u = await s.usage;
  assert.equal(u.inputTokens, g.usage.inputTokens);
  assert.equal(u.outputTokens, g.usage.outputTokens);
});

test('generateObject: zod int/min/max and regex hold, ajv agrees, and it finishes on "stop"', async () => {
  const schema = z.object({
    name: z.string().max(12).regex(/^[A-Z][a-z]+$/),
    age: z.number().int().min(1).max(99),
    pet: z.enum(['dog', 'cat']),
  });
  for (const run of [{ temperature: 0 }, { temperature: 1, seed: 5 }]) {
    const o = await generateObject({ model, schema, prompt: 'Describe a child and a pet.', maxOutputTokens: 300, ...run });
    // An object cut by max_tokens would end on "length" (if it parsed at all): that fails here.
    assert.equal(o.finishReason, 'stop', JSON.stringify(run));
    assert.deepEqual(schema.parse(o.object), o.object);
    const validate = ajv.compile({ ...z.toJSONSchema(schema), $schema: undefined });
    assert.ok(validate(o.object), `${JSON.stringify(o.object)}: ${ajv.errorsText(validate.errors)}`);
  }
});

test('a tool call forced by toolChoice: the named tool, its input valid against the schema', async () => {
  const parameters = {
    type: 'object',
    properties: { city: { type: 'string', maxLength: 12 }, days: { type: 'integer', minimum: 1, maximum: 7 } },
    required: ['city', 'days'],
    additionalProperties: false,
  };
  const tools = {
    get_weather: tool({ description: 'The weather in a city', inputSchema: jsonSchema(parameters) }),
    get_time: tool({ description: 'The time in a city', inputSchema: jsonSchema({ type: 'object', properties: { city: { type: 'string' } } }) }),
  };
  const r = await generateText({
    model, prompt: 'Weather in Paris?', temperature: 0, maxOutputTokens: 200, tools,
    toolChoice: { type: 'tool', toolName: 'get_weather' },
  });
  assert.equal(r.finishReason, 'tool-calls');
  assert.equal(r.toolCalls.length, 1, JSON.stringify(r.toolCalls));
  const call = r.toolCalls[0];
  assert.equal(call.toolName, 'get_weather');
  assert.match(call.toolCallId, /^call_/);
  const validate = ajv.compile(parameters);
  assert.ok(validate(call.input), `${JSON.stringify(call.input)}: ${ajv.errorsText(validate.errors)}`);

  // Streamed, the same call.
  const s = streamText({
    model, prompt: 'Weather in Paris?', temperature: 0, maxOutputTokens: 200, tools,
    toolChoice: { type: 'tool', toolName: 'get_weather' },
  });
  const calls = await s.toolCalls;
  assert.equal(await s.finishReason, 'tool-calls');
  assert.equal(calls.length, 1);
  assert.equal(calls[0].toolName, 'get_weather');
  assert.deepEqual(calls[0].input, call.input);
});
