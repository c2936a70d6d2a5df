// Speculative decoding through the official OpenAI client: Predicted Outputs (`prediction`) give
// the same answer, faster where it matches, with OpenAI's accepted/rejected prediction counts in
// usage and llama.cpp's draft_n in timings; the prompt's own repeats are drafted too; a server
// with --draft-max 0 gives the same answer without drafts; a malformed prediction is a 400 that
// names it.
import { test, before } from 'node:test';
import assert from 'node:assert/strict';
import OpenAI from 'openai';
import { startServer, MODEL } from './server.mjs';

let drafting, plain;
before(async () => {
  [drafting, plain] = await Promise.all([startServer(['--draft-max', '8']), startServer(['--draft-max', '0'])]);
});

// A story that says the same thing several times: the answer tends to repeat it.
const messages = [{
  role: 'user',
  content: 'Tom had a red ball. Tom had a red ball and a blue hat. Lily had a red ball and a blue hat. ' +
    'Tom and Lily had a red ball and a blue hat.',
}];
const base = { model: MODEL, messages, max_tokens: 48, temperature: 0.7, seed: 5 };

async function metric(server, name) {
  const value = (await server.metrics())[name];
  assert.equal(typeof value, 'number', `${name} missing from /metrics`);
  return value;
}

test('a prediction that is the answer is confirmed, and the answer is the same', async () => {
  const expected = await plain.client().chat.completions.create(base);
  const content = expected.choices[0].message.content;
  assert.ok(expected.usage.completion_tokens > 20, JSON.stringify(expected.usage));
  const details = expected.usage.completion_tokens_details;
  assert.equal(details.accepted_prediction_tokens, 0);
  assert.equal(details.rejected_prediction_tokens, 0);

  const before = await metric(drafting, 'promptcache_draft_accepted_tokens_total');
  const r = await drafting.client().chat.completions.create({
    ...base, prediction: { type: 'content', content },
  });
  assert.equal(r.choices[0].message.content, content);
  assert.equal(r.usage.completion_tokens, expected.usage.completion_tokens);
  const d = r.usage.completion_tokens_details;
  // Most tokens come as confirmed guesses (a token can tokenize differently inside the answer
  // than in the prediction alone, so not necessarily all of them).
  assert.ok(d.accepted_prediction_tokens >= r.usage.completion_tokens / 2, JSON.stringify(d));
  assert.equal(r.timings.draft_n, d.accepted_prediction_tokens + d.rejected_prediction_tokens);
  assert.equal(r.timings.draft_n_accepted, d.accepted_prediction_tokens);
  const after = await metric(drafting, 'promptcache_draft_accepted_tokens_total');
  assert.equal(after - before, d.accepted_prediction_tokens);

  // As text parts, streamed: the same answer, the counts in the usage chunk.
  const stream = await drafting.client().chat.completions.create({
    ...base,
    prediction: { type: 'content', content: [{ type: 'text', text: content.slice(0, 20) }, { type: 'text', text: content.slice(20) }] },
    stream: true,
    stream_options: { include_usage: true },
  });
  let text = '';
  let usage;
  for await (const chunk of stream) {
    text += chunk.choices[0]?.delta?.content ?? '';
    if (chunk.usage) usage = chunk.usage;
  }
  assert.equal(text, content);
  assert.ok(usage.completion_tokens_details.accepted_prediction_tokens > 0, JSON.stringify(usage));
});

test('a wrong prediction costs nothing but its rows: the same answer', async () => {
  const expected = await plain.client().chat.completions.create(base);
  const r = await drafting.client().chat.completions.create({
    ...base, prediction: { type: 'content', content: 'Once upon a time there was a cat who sat on a mat all day long.' },
  });
  assert.equal(r.choices[0].message.content, expected.choices[0].message.content);
  const d = r.usage.completion_tokens_details;
  assert.ok(d.rejected_prediction_tokens >= 0 && d.accepted_prediction_tokens >= 0);
});

test('without a prediction, the answer is the same with drafts off', async () => {
  // Greedy and sampled: the repeats of prompt and answer are drafted, and nothing changes.
  for (const temperature of [0, 0.9]) {
    const req = { ...base, temperature, max_tokens: 64, logprobs: true, top_logprobs: 2 };
    const a = await plain.client().chat.completions.create(req);
    const b = await drafting.client().chat.completions.create(req);
    assert.equal(b.choices[0].message.content, a.choices[0].message.content);
    assert.deepEqual(b.choices[0].logprobs, a.choices[0].logprobs);
    assert.equal(a.timings.draft_n, undefined);
  }
  assert.ok(await metric(drafting, 'promptcache_draft_tokens_total') > 0);
  assert.equal(await metric(plain, 'promptcache_draft_tokens_total'), 0);
});

test('a malformed prediction is a 400 naming it', async () => {
  for (const [prediction, param] of [
    [{ type: 'file', content: 'x' }, 'prediction.type'],
    [{ type: 'content' }, 'prediction.content'],
    ['text', 'prediction'],
  ]) {
    await assert.rejects(
      drafting.client().chat.completions.create({ ...base, prediction }),
      (e) => e instanceof OpenAI.APIError && e.status === 400 && e.param === param,
    );
  }
});
