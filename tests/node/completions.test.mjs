// Chat and text completions through the official OpenAI client, streaming and not, and the
// prefix cache as clients see it: cached_tokens and identical greedy output.
import { test, before } from 'node:test';
import assert from 'node:assert/strict';
import { startServer, MODEL, STORY, BLOCK, commonPrefix, expectedCached } from './server.mjs';

let server, cold, client, coldClient;
before(async () => {
  [server, cold] = await Promise.all([startServer(), startServer(['--no-prefix-cache'])]);
  client = server.client();
  coldClient = cold.client();
});

function checkUsage(usage) {
  assert.equal(usage.total_tokens, usage.prompt_tokens + usage.completion_tokens);
  assert.equal(typeof usage.prompt_tokens_details.cached_tokens, 'number');
}

test('models lists the served model', async () => {
  const list = await client.models.list();
  const ids = list.data.map((m) => m.id);
  assert.deepEqual(ids, [MODEL]);
  const m = await client.models.retrieve(MODEL);
  assert.equal(m.id, MODEL);
  assert.equal(m.meta.cache_block_tokens, BLOCK);
});

test('tokenize and detokenize', async () => {
  const tokens = await server.tokenize({ prompt: 'Once upon a time' });
  assert.deepEqual(tokens, [1, 403, 407, 261, 378]);  // the model's README
  const r = await server.json('POST', '/detokenize', { tokens });
  assert.equal(r.status, 200, r.text);
  assert.equal(r.body.content, 'Once upon a time');
  const bad = await server.json('POST', '/detokenize', { tokens: [1, 512] });
  assert.equal(bad.status, 400, bad.text);
  assert.equal(bad.body.error.param, 'tokens');
});

test('text completion, not streamed', async () => {
  const r = await client.completions.create({
    model: MODEL, prompt: 'Once upon a time', max_tokens: 16, temperature: 0,
  });
  assert.equal(r.object, 'text_completion');
  assert.match(r.id, /^cmpl-/);
  assert.equal(r.model, MODEL);
  assert.equal(r.choices.length, 1);
  // The model's README: the greedy continuation starts ", there was a little girl named Lily."
  assert.ok(r.choices[0].text.startsWith(', there was a little girl named Lily'), r.choices[0].text);
  assert.equal(r.choices[0].finish_reason, 'length');
  assert.equal(r.usage.prompt_tokens, 5);
  assert.equal(r.usage.completion_tokens, 16);
  checkUsage(r.usage);
  assert.equal(r.timings.computed_tokens + r.timings.cached_tokens, 5);
  assert.ok(r.timings.generation_tokens_per_second > 0);
});

test('chat completion, not streamed; the general.name alias works', async () => {
  const r = await client.chat.completions.create({
    model: 'llama',
    messages: [{ role: 'system', content: 'You tell stories.' }, { role: 'user', content: 'A story about a cat.' }],
    max_tokens: 12, temperature: 0, seed: 1,
  });
  assert.equal(r.object, 'chat.completion');
  assert.match(r.id, /^chatcmpl-/);
  assert.equal(r.choices[0].message.role, 'assistant');
  assert.equal(typeof r.choices[0].message.content, 'string');
  assert.ok(r.choices[0].message.content.length > 0);
  assert.ok(['stop', 'length'].includes(r.choices[0].finish_reason));
  checkUsage(r.usage);
  const tokens = await server.tokenize({
    messages: [{ role: 'system', content: 'You tell stories.' }, { role: 'user', content: 'A story about a cat.' }],
    add_generation_prompt: true,
  });
  assert.equal(r.usage.prompt_tokens, tokens.length);
});

test('streamed chat with include_usage equals the non-streamed answer', async () => {
  const req = {
    model: MODEL,
    messages: [{ role: 'user', content: 'Tell me about a dog named Max.' }],
    max_tokens: 24, temperature: 0, ignore_eos: true,
  };
  const whole = await client.chat.completions.create(req);
  const stream = await client.chat.completions.create({ ...req, stream: true, stream_options: { include_usage: true } });
  let text = '', role = null, finish = null, usage = null, chunks = 0;
  for await (const chunk of stream) {
    chunks++;
    assert.equal(chunk.object, 'chat.completion.chunk');
    if (chunk.usage) usage = chunk.usage;
    for (const c of chunk.choices) {
      if (c.delta.role) role = c.delta.role;
      if (c.delta.content) text += c.delta.content;
      if (c.finish_reason) finish = c.finish_reason;
    }
  }
  assert.ok(chunks >= 3);
  assert.equal(role, 'assistant');
  assert.equal(finish, 'length');
  assert.equal(text, whole.choices[0].message.content);
  assert.ok(usage, 'a usage chunk arrives with include_usage');
  assert.equal(usage.completion_tokens, 24);
  assert.equal(usage.prompt_tokens, whole.usage.prompt_tokens);
  checkUsage(usage);
});

test('streamed text completion without include_usage has no usage', async () => {
  const stream = await client.completions.create({
    model: MODEL, prompt: 'The little bird', max_tokens: 10, temperature: 0, stream: true, ignore_eos: true,
  });
  let text = '', finish = null, sawUsage = false;
  for await (const chunk of stream) {
    assert.equal(chunk.object, 'text_completion');
    if (chunk.usage) sawUsage = true;
    for (const c of chunk.choices) {
      text += c.text;
      if (c.finish_reason) finish = c.finish_reason;
    }
  }
  assert.equal(finish, 'length');
  assert.ok(text.length > 0);
  assert.equal(sawUsage, false);
  const whole = await client.completions.create({
    model: MODEL, prompt: 'The little bird', max_tokens: 10, temperature: 0, ignore_eos: true,
  });
  assert.equal(text, whole.choices[0].text);
});

test('a shared prefix is reused: cached_tokens is the shared length in whole blocks', async () => {
  const first = STORY + ' The dog ran to the tree.';
  const second = STORY + ' A cat sat on the mat.';
  const [t1, t2] = await Promise.all([server.tokenize({ prompt: first }), server.tokenize({ prompt: second })]);
  const shared = commonPrefix(t1, t2);
  assert.ok(shared > 5 * BLOCK, `the prompts share ${shared} tokens`);

  const r1 = await client.completions.create({ model: MODEL, prompt: first, max_tokens: 8, temperature: 0 });
  assert.equal(r1.usage.prompt_tokens, t1.length);
  const r2 = await client.completions.create({ model: MODEL, prompt: second, max_tokens: 8, temperature: 0 });
  assert.equal(r2.usage.prompt_tokens, t2.length);
  const expected = expectedCached(shared, t2.length);
  assert.ok(expected > 0);
  assert.equal(r2.usage.prompt_tokens_details.cached_tokens, expected);
  assert.equal(r2.timings.cached_tokens, expected);
  assert.equal(r2.timings.computed_tokens, t2.length - expected);

  // The same prompt again: everything but the last block's remainder (and the last token).
  const r3 = await client.completions.create({ model: MODEL, prompt: second, max_tokens: 8, temperature: 0 });
  assert.equal(r3.usage.prompt_tokens_details.cached_tokens, expectedCached(t2.length, t2.length));
});

test('--block-size sets the granularity of reuse', async () => {
  const big = await startServer(['--block-size', '48']);
  try {
    const c = big.client();
    assert.equal((await c.models.retrieve(MODEL)).meta.cache_block_tokens, 48);
    const first = STORY + ' The dog ran to the tree.';
    const second = STORY + ' A cat sat on the mat.';
    const [t1, t2] = await Promise.all([big.tokenize({ prompt: first }), big.tokenize({ prompt: second })]);
    await c.completions.create({ model: MODEL, prompt: first, max_tokens: 8, temperature: 0 });
    const r = await c.completions.create({ model: MODEL, prompt: second, max_tokens: 8, temperature: 0 });
    const expected = Math.floor(Math.min(commonPrefix(t1, t2), t2.length - 1) / 48) * 48;
    assert.ok(expected > 0);
    assert.notEqual(expected, expectedCached(commonPrefix(t1, t2), t2.length), 'not a 16-token block');
    assert.equal(r.usage.prompt_tokens_details.cached_tokens, expected);
    const reference = await coldClient.completions.create({ model: MODEL, prompt: second, max_tokens: 8, temperature: 0 });
    assert.equal(r.choices[0].text, reference.choices[0].text);
  } finally {
    await big.stop();
  }
});

test('chat requests sharing a system prompt hit the cache', async () => {
  const system = { role: 'system', content: STORY };
  const a = [system, { role: 'user', content: 'What did Lily see?' }];
  const b = [system, { role: 'user', content: 'Who played with the dog?' }];
  const [ta, tb] = await Promise.all([
    server.tokenize({ messages: a, add_generation_prompt: true }),
    server.tokenize({ messages: b, add_generation_prompt: true }),
  ]);
  const ra = await client.chat.completions.create({ model: MODEL, messages: a, max_tokens: 4, temperature: 0 });
  assert.equal(ra.usage.prompt_tokens, ta.length);
  const rb = await client.chat.completions.create({ model: MODEL, messages: b, max_tokens: 4, temperature: 0 });
  assert.equal(rb.usage.prompt_tokens_details.cached_tokens, expectedCached(commonPrefix(ta, tb), tb.length));
  assert.ok(rb.usage.prompt_tokens_details.cached_tokens > 0);
});

test('greedy output with a cache hit is identical to the output without the cache', async () => {
  const prompts = [STORY + ' Then a boy came', STORY + ' Then a big bear came', STORY];
  for (const prompt of prompts) {
    const req = { model: MODEL, prompt, max_tokens: 48, temperature: 0, ignore_eos: true };
    const warm = await client.completions.create(req);  // earlier tests cached most of STORY
    assert.ok(warm.usage.prompt_tokens_details.cached_tokens > 0, 'a hit on the warm server');
    const reference = await coldClient.completions.create(req);
    assert.equal(reference.usage.prompt_tokens_details.cached_tokens, 0, '--no-prefix-cache never hits');
    assert.deepEqual(warm.choices[0].text, reference.choices[0].text);
  }
  // Chat, streamed, against the cold server's non-streamed answer.
  const messages = [{ role: 'system', content: STORY }, { role: 'user', content: 'What did Lily see?' }];
  const reference = await coldClient.chat.completions.create({ model: MODEL, messages, max_tokens: 32, temperature: 0 });
  const stream = await client.chat.completions.create({
    model: MODEL, messages, max_tokens: 32, temperature: 0, stream: true, stream_options: { include_usage: true },
  });
  let text = '', cached = -1;
  for await (const chunk of stream) {
    for (const c of chunk.choices) text += c.delta.content ?? '';
    if (chunk.usage) cached = chunk.usage.prompt_tokens_details.cached_tokens;
  }
  assert.ok(cached > 0);
  assert.equal(text, reference.choices[0].message.content);
});

test('stop sequences and seeded sampling', async () => {
  const r = await client.completions.create({
    model: MODEL, prompt: 'Once upon a time', max_tokens: 40, temperature: 0, stop: ['Lily'],
  });
  assert.equal(r.choices[0].finish_reason, 'stop');
  assert.equal(r.choices[0].text, ', there was a little girl named ');
  const sampled = { model: MODEL, prompt: 'Once upon a time', max_tokens: 20, temperature: 1, seed: 1234, ignore_eos: true };
  const s1 = await client.completions.create(sampled);
  const s2 = await client.completions.create(sampled);
  assert.equal(s1.choices[0].text, s2.choices[0].text);
});
