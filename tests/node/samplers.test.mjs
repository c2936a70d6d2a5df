// llama-server's further samplers through the official OpenAI client (extra body fields, as
// llama-server's users send them): DRY stops the greedy story from repeating itself, mirostat
// with a tiny target surprise and top-n-sigma 0 both leave only the best token (the greedy
// text at temperature 1), and bad values are 400s that name the field.
import { test, before } from 'node:test';
import assert from 'node:assert/strict';
import OpenAI from 'openai';
import { startServer, MODEL } from './server.mjs';

let client;
before(async () => {
  client = (await startServer()).client();
});

const base = { model: MODEL, prompt: 'Once upon a time', max_tokens: 96, logprobs: 0 };
const tokens = (r) => r.choices[0].logprobs.tokens;

// How many token 4-grams of the text stand earlier in it too.
function repeated4(pieces) {
  const seen = new Set();
  let repeats = 0;
  for (let i = 0; i + 4 <= pieces.length; i++) {
    const key = JSON.stringify(pieces.slice(i, i + 4));
    if (seen.has(key)) repeats++;
    seen.add(key);
  }
  return repeats;
}

test('DRY: the greedy story stops repeating runs of its own tokens', async () => {
  const long = { ...base, max_tokens: 200 };
  const greedy = await client.completions.create({ ...long, temperature: 0 });
  const before = repeated4(tokens(greedy));
  assert.ok(before > 10, `the greedy text repeats itself (${before} repeated 4-grams)`);
  // Breakers the story never writes, so that repeats may run across its lines and quotes.
  const dry = await client.completions.create({
    ...long, temperature: 0, dry_multiplier: 10, dry_base: 2, dry_allowed_length: 2,
    dry_sequence_breakers: ['|'],
  });
  assert.equal(repeated4(tokens(dry)), 0, dry.choices[0].text);
  // With the default breakers (newline, colon, quote, asterisk) it still cuts the repeats.
  const defaults = await client.completions.create({ ...long, temperature: 0, dry_multiplier: 10 });
  assert.ok(repeated4(tokens(defaults)) < before, defaults.choices[0].text);
  // Chat reads the same fields: the penalty changes its greedy answer too.
  const chat = (extra) => client.chat.completions.create({
    model: MODEL, messages: [{ role: 'user', content: 'Once upon a time' }], max_tokens: 64,
    temperature: 0, ...extra,
  });
  const plainChat = (await chat({})).choices[0].message.content;
  const dryChat = (await chat({ dry_multiplier: 10, dry_sequence_breakers: ['|'] })).choices[0].message.content;
  assert.notEqual(dryChat, plainChat);
});

test('mirostat with a tiny target surprise, and top-n-sigma 0, sample only the best token', async () => {
  const greedy = (await client.completions.create({ ...base, temperature: 0 })).choices[0].text;
  const sampled = (await client.completions.create({ ...base, temperature: 1, seed: 3 })).choices[0].text;
  assert.notEqual(sampled, greedy, 'plain sampling at temperature 1 leaves the greedy path');
  const miro = await client.completions.create({
    ...base, temperature: 1, seed: 3, mirostat: 2, mirostat_tau: 0.1, mirostat_eta: 0.1,
  });
  assert.equal(miro.choices[0].text, greedy);
  const sigma = await client.completions.create({ ...base, temperature: 1, seed: 3, top_n_sigma: 0 });
  assert.equal(sigma.choices[0].text, greedy);
  // Mirostat 1 and 2 at a high target, typical-p and XTC run and differ from greedy text.
  for (const extra of [{ mirostat: 1, mirostat_tau: 8 }, { mirostat: 2, mirostat_tau: 8 },
    { typical_p: 0.5 }, { xtc_probability: 1, xtc_threshold: 0.05 }]) {
    const r = await client.completions.create({ ...base, temperature: 1, seed: 3, ...extra });
    assert.ok(r.choices[0].text.length > 0, JSON.stringify(extra));
  }
});

test('bad sampler values are 400s naming the field', async () => {
  for (const [extra, param] of [
    [{ mirostat: 3 }, 'mirostat'],
    [{ typical_p: 2 }, 'typical_p'],
    [{ dry_base: 0.5 }, 'dry_base'],
    [{ dry_sequence_breakers: ['a', ''] }, 'dry_sequence_breakers[1]'],
    [{ dry_sequence_breakers: 'a' }, 'dry_sequence_breakers'],
  ]) {
    await assert.rejects(client.completions.create({ ...base, ...extra }), (e) => {
      assert.ok(e instanceof OpenAI.BadRequestError, String(e));
      assert.equal(e.param, param, e.message);
      return true;
    });
  }
});
