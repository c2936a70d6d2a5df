// Issue 14's client features through the official OpenAI client: log-probabilities (chat
// logprobs/top_logprobs, completions logprobs and echo, streamed too), n > 1 choices forked from
// one prefill, seed reproducibility, and strictness (fields this server does not implement are
// a 400 naming them, never silently ignored).
import { test, before } from 'node:test';
import assert from 'node:assert/strict';
import OpenAI from 'openai';
import { startServer, MODEL, STORY } from './server.mjs';

let server, client;
before(async () => {
  server = await startServer(['--parallel', '2']);
  client = server.client();
});

const messages = [{ role: 'user', content: 'Tell me a story about a dog.' }];

function checkTopLogprobs(entry, k) {
  assert.equal(typeof entry.token, 'string');
  assert.ok(entry.logprob <= 0, JSON.stringify(entry));
  assert.deepEqual(entry.bytes, [...Buffer.from(entry.token)]);
  assert.equal(entry.top_logprobs.length, k);
  for (let i = 1; i < k; i++) assert.ok(entry.top_logprobs[i].logprob <= entry.top_logprobs[i - 1].logprob);
}

test('chat logprobs and top_logprobs', async () => {
  const r = await client.chat.completions.create({
    model: MODEL, messages, max_tokens: 8, temperature: 0, logprobs: true, top_logprobs: 3,
  });
  const content = r.choices[0].logprobs.content;
  assert.equal(content.length, r.usage.completion_tokens);
  assert.equal(content.map((e) => e.token).join(''), r.choices[0].message.content);
  for (const e of content) {
    checkTopLogprobs(e, 3);
    assert.equal(e.top_logprobs[0].token, e.token);  // greedy
    assert.equal(e.top_logprobs[0].logprob, e.logprob);
  }
  // Without logprobs: null, as OpenAI answers.
  const plain = await client.chat.completions.create({ model: MODEL, messages, max_tokens: 2 });
  assert.equal(plain.choices[0].logprobs, null);
});

test('streamed chat logprobs cover every token once', async () => {
  const stream = await client.chat.completions.create({
    model: MODEL, messages, max_tokens: 12, temperature: 0, logprobs: true, top_logprobs: 2, stream: true,
  });
  let text = '';
  const entries = [];
  for await (const chunk of stream) {
    const c = chunk.choices[0];
    if (!c) continue;
    text += c.delta?.content ?? '';
    for (const e of c.logprobs?.content ?? []) entries.push(e);
  }
  assert.equal(entries.length, 12);
  assert.equal(entries.map((e) => e.token).join(''), text);
  const whole = await client.chat.completions.create({
    model: MODEL, messages, max_tokens: 12, temperature: 0, logprobs: true, top_logprobs: 2,
  });
  assert.deepEqual(entries.map((e) => e.logprob), whole.choices[0].logprobs.content.map((e) => e.logprob));
});

test('completions echo scores the prompt (lm-eval style), cached or not', async () => {
  const context = STORY.slice(0, 300);
  const prompt = context + ' The dog was happy.';
  const tokens = await server.tokenize({ prompt });
  const score = () => client.completions.create({
    model: MODEL, prompt, max_tokens: 0, echo: true, logprobs: 1, temperature: 0,
  });
  const first = await score();
  const again = await score();  // its prefix now comes from the cache
  assert.ok(again.usage.prompt_tokens_details.cached_tokens > 0);
  for (const r of [first, again]) {
    const lp = r.choices[0].logprobs;
    assert.equal(r.choices[0].text, prompt);
    assert.equal(lp.tokens.length, tokens.length);
    assert.equal(lp.token_logprobs[0], null);
    assert.equal(lp.top_logprobs[0], null);
    assert.equal(r.usage.completion_tokens, 0);
    for (let i = 1; i < tokens.length; i++) {
      assert.ok(lp.token_logprobs[i] <= 0);
      assert.equal(Object.keys(lp.top_logprobs[i]).length, 1);
    }
    assert.equal(lp.text_offset[1], lp.tokens[0].length);
  }
  const a = first.choices[0].logprobs.token_logprobs, b = again.choices[0].logprobs.token_logprobs;
  for (let i = 1; i < a.length; i++) assert.ok(Math.abs(a[i] - b[i]) < 1e-3, `token ${i}: ${a[i]} vs ${b[i]}`);
  // The continuation's score, as a harness sums it, and the same prompt streamed.
  const stream = await client.completions.create({
    model: MODEL, prompt, max_tokens: 2, echo: true, logprobs: 1, temperature: 0, stream: true,
  });
  let text = '';
  const values = [];
  for await (const chunk of stream) {
    for (const c of chunk.choices) {
      text += c.text;
      if (c.logprobs) values.push(...c.logprobs.token_logprobs);
    }
  }
  assert.ok(text.startsWith(prompt));
  assert.equal(values.length, tokens.length + 2);
  assert.deepEqual(values.slice(0, tokens.length), a);
});

test('n > 1: choices from one prefill, prompt counted once; seed reproduces them', async () => {
  const ask = (seed) => client.chat.completions.create({
    model: MODEL, messages, max_tokens: 10, temperature: 1, n: 4, seed,
  });
  const a = await ask(7);
  assert.equal(a.choices.length, 4);
  assert.deepEqual(a.choices.map((c) => c.index), [0, 1, 2, 3]);
  const texts = a.choices.map((c) => c.message.content);
  assert.ok(new Set(texts).size > 1, 'choices use different streams');
  const single = await client.chat.completions.create({ model: MODEL, messages, max_tokens: 10 });
  assert.equal(a.usage.prompt_tokens, single.usage.prompt_tokens);
  const b = await ask(7);
  assert.deepEqual(b.choices.map((c) => c.message.content), texts);
  const c = await ask(8);
  assert.notDeepEqual(c.choices.map((x) => x.message.content), texts);
  // Completions too, with logprobs per choice.
  const comp = await client.completions.create({
    model: MODEL, prompt: 'Once upon a time', max_tokens: 6, n: 3, seed: 1, logprobs: 0,
  });
  assert.equal(comp.choices.length, 3);
  for (const ch of comp.choices) assert.equal(ch.logprobs.tokens.join(''), ch.text);
  assert.equal(comp.usage.completion_tokens,
    comp.choices.reduce((s, ch) => s + ch.logprobs.tokens.length, 0));
});

test('n > 1 streamed: indexed choices, each finished', async () => {
  const stream = await client.chat.completions.create({
    model: MODEL, messages, max_tokens: 10, n: 3, seed: 7, temperature: 1, stream: true,
  });
  const texts = ['', '', ''];
  const finished = [null, null, null];
  for await (const chunk of stream) {
    for (const c of chunk.choices) {
      texts[c.index] += c.delta?.content ?? '';
      if (c.finish_reason) finished[c.index] = c.finish_reason;
    }
  }
  assert.ok(finished.every((f) => f === 'length' || f === 'stop'), JSON.stringify(finished));
  const whole = await client.chat.completions.create({
    model: MODEL, messages, max_tokens: 10, n: 3, seed: 7, temperature: 1,
  });
  assert.deepEqual(texts, whole.choices.map((c) => c.message.content));
});

test('fields this server does not implement are refused by name', async () => {
  const cases = [
    ['guided_regex', 'a+'], ['guided_grammar', 'root ::= "a"'], ['tfs_z', 0.9],
    ['n_probs', 3], ['temprature', 0.5],
  ];
  for (const [field, value] of cases) {
    await assert.rejects(
      client.chat.completions.create({ model: MODEL, messages, max_tokens: 2, [field]: value }),
      (e) => e instanceof OpenAI.BadRequestError && e.param === field && e.message.includes(field),
      field);
  }
  // Harmless ones are accepted.
  const r = await client.chat.completions.create({
    model: MODEL, messages, max_tokens: 2, user: 'u', store: false, metadata: { a: 'b' },
  });
  assert.equal(r.choices.length, 1);
});
