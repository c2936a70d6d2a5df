// OpenAI's 2026 prompt caching fields through the official `openai` client (6.49): a text part's
// `prompt_cache_breakpoint` ({"mode": "explicit"}) pins the prompt through the end of that part
// for `prompt_cache_options.ttl` (30 minutes), so that it survives DELETE /v1/cache;
// `prompt_cache_options.mode` and `prompt_cache_retention` are checked and have no effect (the
// prefix cache is always on); usage's cache_write_tokens counts what the pins cover beyond what
// was read; the Responses API's input_text parts take the breakpoint too; wrong values are 400s
// naming them.
// What a breakpoint covers is computed here from /tokenize (which knows nothing of breakpoints):
// the tokens the conversation cut after the marked part shares with the whole prompt.
//
// Mutations tried (each failed these tests, then reverted): the breakpoint recorded at the
// start of its part instead of its end; the pins not passed to the engine (openai_routes.cc).
import { test, before } from 'node:test';
import assert from 'node:assert/strict';
import { startServer, MODEL, STORY, BLOCK, commonPrefix } from './server.mjs';

let s;
before(async () => { s = await startServer(); });

const SECOND = 'Lily and her dog walked home after the rain stopped.';
const conversation = (question) => [
  { role: 'system', content: 'You tell stories.' },
  { role: 'user', content: [
    { type: 'text', text: STORY, prompt_cache_breakpoint: { mode: 'explicit' } },
    { type: 'text', text: question },
  ] },
];

// The tokens a breakpoint after STORY covers: /tokenize of the conversation cut there (a
// finished prefix) against the whole prompt.
async function covered(question) {
  const whole = await s.tokenize({ messages: [{ role: 'system', content: 'You tell stories.' },
    { role: 'user', content: `${STORY}\n${question}` }], add_generation_prompt: true });
  const cut = await s.tokenize({ messages: [{ role: 'system', content: 'You tell stories.' },
    { role: 'user', content: STORY }], add_generation_prompt: false });
  return commonPrefix(cut, whole);
}

test('a prompt_cache_breakpoint pins the prompt through its part; the pin outlives DELETE /v1/cache', async () => {
  const client = s.client();
  const r = await client.chat.completions.create({
    model: MODEL, max_tokens: 2, temperature: 0, messages: conversation('Who was there?'),
    prompt_cache_options: { mode: 'explicit', ttl: '30m' }, prompt_cache_retention: '24h',
  });
  const want = await covered('Who was there?');
  assert.ok(want > 10 * BLOCK, `${want}`);
  assert.equal(r.usage.pinned_tokens, Math.floor(want / BLOCK) * BLOCK, JSON.stringify(r.usage));
  assert.equal(r.usage.pin_limited, false);
  // Written to the cache: what the pin covers beyond what was read (nothing, on a fresh server).
  assert.equal(r.usage.prompt_tokens_details.cached_tokens, 0);
  assert.equal(r.usage.prompt_tokens_details.cache_write_tokens, r.usage.pinned_tokens);

  assert.equal((await s.json('DELETE', '/v1/cache')).status, 200);
  const again = await client.chat.completions.create({
    model: MODEL, max_tokens: 2, temperature: 0, messages: conversation(SECOND),
  });
  assert.ok(again.usage.prompt_tokens_details.cached_tokens >= r.usage.pinned_tokens,
    JSON.stringify(again.usage));
  // The same breakpoint: the pinned prefix is read, nothing is written.
  assert.equal(again.usage.pinned_tokens, r.usage.pinned_tokens, JSON.stringify(again.usage));
  assert.equal(again.usage.prompt_tokens_details.cache_write_tokens, 0, JSON.stringify(again.usage));

  // Without a breakpoint nothing is pinned, and a drop leaves nothing to reuse.
  const plain = [{ role: 'user', content: `${SECOND} ${STORY}` }];
  const p = await client.chat.completions.create({ model: MODEL, max_tokens: 2, messages: plain });
  assert.equal(p.usage.pinned_tokens, undefined, JSON.stringify(p.usage));
  assert.equal(p.usage.prompt_tokens_details.cache_write_tokens, 0);
  assert.equal((await s.json('DELETE', '/v1/cache')).status, 200);
  const q = await client.chat.completions.create({ model: MODEL, max_tokens: 2, messages: plain });
  assert.equal(q.usage.prompt_tokens_details.cached_tokens, 0);
});

test('the Responses API takes the same breakpoint on an input_text part', async () => {
  const client = s.client();
  const input = (question) => [
    { role: 'system', content: 'You tell stories.' },
    { role: 'user', content: [
      { type: 'input_text', text: STORY, prompt_cache_breakpoint: { mode: 'explicit' } },
      { type: 'input_text', text: question },
    ] },
  ];
  const r = await client.responses.create({ model: MODEL, max_output_tokens: 2, temperature: 0,
    input: input('Who was there?'), prompt_cache_options: { ttl: '30m' }, store: false });
  const want = await covered('Who was there?');
  assert.equal(r.usage.pinned_tokens, Math.floor(want / BLOCK) * BLOCK, JSON.stringify(r.usage));
  const details = r.usage.input_tokens_details;
  assert.equal(details.cache_write_tokens, Math.max(0, r.usage.pinned_tokens - details.cached_tokens),
    JSON.stringify(r.usage));
  await assert.rejects(client.responses.create({ model: MODEL, max_output_tokens: 2, store: false,
    input: [{ role: 'user', content: [{ type: 'input_text', text: 'x', prompt_cache_breakpoint: { mode: 'auto' } }] }] }),
  (e) => e.status === 400 && e.param === 'input[0].content[0].prompt_cache_breakpoint');
});

test('prompt caching fields with wrong values are 400s naming them', async () => {
  const client = s.client();
  const messages = [{ role: 'user', content: 'hi' }];
  const cases = [
    [{ prompt_cache_options: { mode: 'always' } }, 'prompt_cache_options.mode'],
    [{ prompt_cache_options: { ttl: '1h' } }, 'prompt_cache_options.ttl'],
    [{ prompt_cache_options: { size: 1 } }, 'prompt_cache_options.size'],
    [{ prompt_cache_options: 'explicit' }, 'prompt_cache_options'],
    [{ prompt_cache_retention: 'forever' }, 'prompt_cache_retention'],
    [{ messages: [{ role: 'user', content: [{ type: 'text', text: 'x',
      prompt_cache_breakpoint: { mode: 'implicit' } }] }] }, 'messages[0].content[0].prompt_cache_breakpoint.mode'],
    [{ messages: [{ role: 'user', content: [{ type: 'text', text: 'x',
      prompt_cache_breakpoint: true }] }] }, 'messages[0].content[0].prompt_cache_breakpoint'],
  ];
  for (const [extra, param] of cases) {
    await assert.rejects(client.chat.completions.create({ model: MODEL, max_tokens: 1, messages, ...extra }),
      (e) => e.status === 400 && e.param === param, `${JSON.stringify(extra)} names ${param}`);
  }
  const ok = await client.chat.completions.create({ model: MODEL, max_tokens: 1, messages,
    prompt_cache_options: { mode: 'implicit' }, prompt_cache_retention: 'in_memory' });
  assert.equal(ok.object, 'chat.completion');
});
