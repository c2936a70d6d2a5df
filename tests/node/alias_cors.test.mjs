// --alias (more names for the model, on the OpenAI routes and /v1/messages, listed by
// /v1/models) and --cors (CORS headers for allowed origins only, preflights answered before
// authentication), with plain fetch.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { startServer, MODEL } from './server.mjs';

const ALLOWED = 'https://app.example';

async function preflight(s, origin, route = '/v1/messages') {
  return fetch(s.url + route, {
    method: 'OPTIONS',
    headers: {
      origin,
      'access-control-request-method': 'POST',
      'access-control-request-headers': 'x-api-key, anthropic-version, content-type, x-stainless-os',
    },
  });
}

test('--alias: the model answers to its aliases; other names stay 404', async () => {
  const s = await startServer(['--alias', 'gpt-4o', '--alias', 'claude-sonnet-4']);
  const models = await s.json('GET', '/v1/models');
  assert.deepEqual(models.body.data.map((m) => m.id), [MODEL, 'gpt-4o', 'claude-sonnet-4']);
  const one = await s.json('GET', '/v1/models/gpt-4o');
  assert.equal(one.status, 200);
  assert.equal(one.body.id, 'gpt-4o');

  const client = s.client();
  const chat = await client.chat.completions.create({ model: 'gpt-4o', max_tokens: 2, messages: [{ role: 'user', content: 'Hi' }] });
  assert.equal(chat.model, 'gpt-4o');
  const completion = await client.completions.create({ model: 'claude-sonnet-4', max_tokens: 2, prompt: 'Once' });
  assert.equal(completion.model, 'claude-sonnet-4');
  const message = await s.json('POST', '/v1/messages', { model: 'claude-sonnet-4', max_tokens: 2, messages: [{ role: 'user', content: 'Hi' }] });
  assert.equal(message.status, 200, message.text);
  assert.equal(message.body.model, 'claude-sonnet-4');

  const unknown = await s.json('POST', '/v1/chat/completions', { model: 'gpt-5', max_tokens: 2, messages: [{ role: 'user', content: 'Hi' }] });
  assert.equal(unknown.status, 404);
  assert.equal(unknown.body.error.code, 'model_not_found');
  const unknownMessage = await s.json('POST', '/v1/messages', { model: 'gpt-5', max_tokens: 2, messages: [{ role: 'user', content: 'Hi' }] });
  assert.equal(unknownMessage.status, 404);
  assert.equal(unknownMessage.body.error.type, 'not_found_error');
  assert.equal((await s.json('GET', '/v1/models/gpt-5')).status, 404);
});

test('--cors: headers for allowed origins only; preflights before the key', async () => {
  const s = await startServer(['--cors', ALLOWED, '--api-key', 'k']);
  const pre = await preflight(s, ALLOWED);
  assert.equal(pre.status, 204);
  assert.equal(pre.headers.get('access-control-allow-origin'), ALLOWED);
  assert.match(pre.headers.get('access-control-allow-methods'), /POST/);
  const allowedHeaders = pre.headers.get('access-control-allow-headers').split(', ');
  for (const h of ['authorization', 'x-api-key', 'anthropic-version', 'content-type', 'x-stainless-os']) {
    assert.ok(allowedHeaders.includes(h), `${h} in ${allowedHeaders}`);
  }

  const body = { model: MODEL, max_tokens: 2, messages: [{ role: 'user', content: 'Hi' }] };
  const ok = await s.json('POST', '/v1/messages', body, { origin: ALLOWED, 'x-api-key': 'k' });
  assert.equal(ok.status, 200, ok.text);
  assert.equal(ok.headers.get('access-control-allow-origin'), ALLOWED);
  // A browser page must be able to read a refusal too.
  const refused = await s.json('POST', '/v1/messages', body, { origin: ALLOWED });
  assert.equal(refused.status, 401);
  assert.equal(refused.headers.get('access-control-allow-origin'), ALLOWED);
  assert.equal(refused.body.error.type, 'authentication_error');

  // Another origin: no CORS header, and its preflight is not answered.
  const other = await s.json('GET', '/v1/models', undefined, { origin: 'https://evil.example', authorization: 'Bearer k' });
  assert.equal(other.status, 200);
  assert.equal(other.headers.get('access-control-allow-origin'), null);
  const otherPre = await preflight(s, 'https://evil.example');
  assert.notEqual(otherPre.status, 204);
  assert.equal(otherPre.headers.get('access-control-allow-origin'), null);
  // No Origin (not a browser): nothing either.
  assert.equal((await s.json('GET', '/health')).headers.get('access-control-allow-origin'), null);
});

test('without --cors no CORS headers; --cors "*" allows any origin', async () => {
  const plain = await startServer();
  const r = await plain.json('GET', '/v1/models', undefined, { origin: ALLOWED });
  assert.equal(r.status, 200);
  assert.equal(r.headers.get('access-control-allow-origin'), null);
  const pre = await preflight(plain, ALLOWED);
  assert.equal(pre.status, 405);
  assert.equal(pre.headers.get('access-control-allow-origin'), null);

  const any = await startServer(['--cors', '*']);
  const a = await any.json('GET', '/v1/models', undefined, { origin: 'https://anything.example' });
  assert.equal(a.headers.get('access-control-allow-origin'), '*');
  assert.equal((await preflight(any, 'https://anything.example', '/v1/chat/completions')).status, 204);
});
