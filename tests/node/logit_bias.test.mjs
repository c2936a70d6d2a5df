// logit_bias through the official OpenAI client: a map from token ids to a bias added to that
// token's logit before sampling, on /v1/completions and /v1/chat/completions. -100 bans a token,
// 100 forces it, log-probabilities stay the model's own, and a bad map is a 400 (APIError).
// The generated tokens are read from logprobs (`tokens`: each token's text), so no text is
// tokenized again to find them.
import { test, before } from 'node:test';
import assert from 'node:assert/strict';
import OpenAI from 'openai';
import { startServer, MODEL } from './server.mjs';

let server, client;
const PROMPT = 'Once upon a time';

before(async () => {
  server = await startServer();
  client = server.client();
});

async function complete(extra) {
  return client.completions.create({ model: MODEL, prompt: PROMPT, max_tokens: 8, temperature: 0, logprobs: 0, ...extra });
}
const pieces = (r) => r.choices[0].logprobs.tokens;

// The id and text of each token of `text` (no BOS).
async function tokensOf(text) {
  const r = await server.json('POST', '/tokenize', { content: text, add_special: false, with_pieces: true });
  assert.equal(r.status, 200, r.text);
  return r.body.tokens;
}

test('-100 bans the greedy first token everywhere; a tiny bias changes nothing; chat reads it too', async () => {
  const greedy = await complete({});
  // The greedy first token's id: the prompt and the text tokenized, checked against what was
  // generated (the same pieces), then the first one past the prompt.
  const prompt = await tokensOf(PROMPT);
  const all = await tokensOf(PROMPT + greedy.choices[0].text);
  assert.deepEqual(all.slice(prompt.length).map((t) => t.piece), pieces(greedy));
  const first = all[prompt.length];
  const banned = await complete({ logit_bias: { [first.id]: -100 } });
  assert.notEqual(banned.choices[0].text, greedy.choices[0].text);
  assert.equal(pieces(banned).length, 8);
  assert.ok(!pieces(banned).includes(first.piece), `${JSON.stringify(first)} in ${JSON.stringify(pieces(banned))}`);
  // Sampled too: 20 seeds never draw it (at temperature 1 it is the likeliest token).
  for (let seed = 1; seed <= 20; seed++) {
    const r = await complete({ logit_bias: { [first.id]: -100 }, temperature: 1, seed, max_tokens: 2 });
    assert.ok(!pieces(r).includes(first.piece), `seed ${seed}: ${JSON.stringify(pieces(r))}`);
  }
  const mild = await complete({ logit_bias: { [first.id]: -0.001 } });
  assert.equal(mild.choices[0].text, greedy.choices[0].text);

  const chat = (logit_bias) => client.chat.completions.create({
    model: MODEL, messages: [{ role: 'user', content: 'A story.' }], max_tokens: 6, temperature: 0,
    logprobs: true, logit_bias,
  });
  const plain = await chat(undefined);
  const plainFirst = plain.choices[0].logprobs.content[0].token;
  const [id] = (await tokensOf(plainFirst)).filter((t) => t.piece === plainFirst).map((t) => t.id);
  assert.ok(id !== undefined, `no single token for ${JSON.stringify(plainFirst)}`);
  const other = await chat({ [id]: -100 });
  assert.notEqual(other.choices[0].logprobs.content[0].token, plainFirst);
  assert.notEqual(other.choices[0].message.content, plain.choices[0].message.content);
});

test('100 forces a token at every step, even sampled; logprobs stay unbiased', async () => {
  // " time", the prompt's last token: never what the model says right after it.
  const time = (await tokensOf(PROMPT)).at(-1);
  assert.equal(time.piece, ' time');
  const r = await complete({ logit_bias: { [time.id]: 100 }, max_tokens: 5, temperature: 1, seed: 7 });
  assert.deepEqual(pieces(r), Array(5).fill(' time'));
  // The model's own log-probability (as OpenAI's since 2024), not the biased one (about 0): the
  // same value as scoring the prompt with " time" once more after it (echo, no bias).
  const lp = r.choices[0].logprobs.token_logprobs[0];
  assert.ok(lp < -1, `logprob ${lp}`);
  const scored = await client.completions.create({
    model: MODEL, prompt: PROMPT + ' time', max_tokens: 0, echo: true, logprobs: 0,
  });
  const s = scored.choices[0].logprobs;
  assert.deepEqual(s.tokens.slice(-2), [' time', ' time']);
  assert.ok(Math.abs(s.token_logprobs.at(-1) - lp) < 1e-4, `${s.token_logprobs.at(-1)} vs ${lp}`);
});

test('a bad logit_bias is a 400 APIError naming it', async () => {
  const bad = [
    [{ 512: 5 }, /outside the vocabulary of 512 tokens/],
    [{ abc: 5 }, /'abc' is not a token id/],
    [{ 3: 101 }, /between -100 and 100/],
    [{ 3: 'x' }, /must be a number/],
    [[[3, 5]], /must be an object/],
  ];
  for (const [bias, message] of bad) {
    await assert.rejects(complete({ logit_bias: bias }), (e) => {
      assert.ok(e instanceof OpenAI.APIError, String(e));
      assert.equal(e.status, 400);
      assert.match(e.message, message);
      assert.match(e.param ?? '', /^logit_bias/);
      return true;
    });
  }
  const many = Object.fromEntries(Array.from({ length: 1025 }, (_, i) => [i, 1]));
  await assert.rejects(
    client.chat.completions.create({ model: MODEL, messages: [{ role: 'user', content: 'x' }], logit_bias: many }),
    (e) => e instanceof OpenAI.BadRequestError && /at most 1024/.test(e.message));
});
