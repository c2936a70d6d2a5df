// Eight clients at once with a shared system prompt: every answer is the one the request gets
// alone, the shared prefix comes from the cache, and its blocks are counted once in the cache's
// RAM bytes.
import { test, before } from 'node:test';
import assert from 'node:assert/strict';
import { startServer, MODEL, STORY, BLOCK, commonPrefix, expectedCached } from './server.mjs';

const QUESTIONS = [
  'Where did Lily go?', 'Who had a long tail?', 'What color was the ball?', 'Why was Lily happy?',
  'Tell me about the birds.', 'Name the games they played.', 'How did the day end?', 'Did Lily sleep well?',
];
const MAX_TOKENS = 20;
const messagesFor = (q) => [{ role: 'system', content: STORY }, { role: 'user', content: q }];

let server, reference;
before(async () => {
  [server, reference] = await Promise.all([
    startServer(['--parallel', '8']),
    startServer(['--no-prefix-cache', '--parallel', '1']),
  ]);
});

test('8 concurrent clients sharing a system prompt', async () => {
  const client = server.client();
  const refClient = reference.client();
  const request = (q) => ({ model: MODEL, messages: messagesFor(q), max_tokens: MAX_TOKENS, temperature: 0, ignore_eos: true });

  // What each request answers alone, on a server without the prefix cache.
  const expected = [];
  for (const q of QUESTIONS) expected.push((await refClient.chat.completions.create(request(q))).choices[0].message.content);

  // One request puts the system prompt in the cache; then all eight at once.
  const warmQuestion = 'What is this story about?';
  const warm = await client.chat.completions.create(request(warmQuestion));
  assert.equal(warm.usage.prompt_tokens_details.cached_tokens, 0);
  const results = await Promise.all(QUESTIONS.map((q) => client.chat.completions.create(request(q))));

  const prompts = await Promise.all([warmQuestion, ...QUESTIONS].map((q) =>
    server.tokenize({ messages: messagesFor(q), add_generation_prompt: true })));
  const warmTokens = prompts[0];
  for (let i = 0; i < QUESTIONS.length; i++) {
    const r = results[i];
    assert.equal(r.choices[0].message.content, expected[i], `answer ${i} matches the cold server's`);
    assert.equal(r.usage.completion_tokens, MAX_TOKENS);
    assert.equal(r.usage.prompt_tokens, prompts[i + 1].length);
    const shared = commonPrefix(warmTokens, prompts[i + 1]);
    assert.ok(shared > 4 * BLOCK);
    assert.ok(r.usage.prompt_tokens_details.cached_tokens >= expectedCached(shared, prompts[i + 1].length),
      `request ${i}: ${r.usage.prompt_tokens_details.cached_tokens} cached tokens`);
  }

  // Distinct blocks over all nine sequences (prompt + the generated tokens fed back, i.e. all but
  // the last): blocks inside a prompt are keyed by their tokens, later ones are each request's own.
  const perToken = (await client.models.retrieve(MODEL)).meta.kv_bytes_per_token;
  const keys = new Set();
  let naive = 0;
  prompts.forEach((p, i) => {
    const length = p.length + MAX_TOKENS - 1;
    for (let b = 1; b * BLOCK <= length; b++) {
      keys.add(b * BLOCK <= p.length ? p.slice(0, b * BLOCK).join(',') : `generated:${i}:${b}`);
      naive++;
    }
  });
  const m = await server.metrics();
  assert.equal(m['promptcache_cache_bytes{tier="ram"}'], keys.size * BLOCK * perToken);
  assert.ok(keys.size < naive - 8 * 4, 'the shared system prompt is stored once');
  assert.equal(m.promptcache_requests_total, 9);
  assert.equal(m.promptcache_requests_active, 0);
});
