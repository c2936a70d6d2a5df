// Anthropic's document content blocks through the official client (@anthropic-ai/sdk): a text
// source and a content source are rendered into the user's turn (docs/server.md: the XML tags of
// Anthropic's long-context guide), so a document counts and answers exactly as its rendering
// sent as a text block; PDFs (base64), URLs, files, images and citations stay a 400 naming them.
import { test, before } from 'node:test';
import assert from 'node:assert/strict';
import Anthropic from '@anthropic-ai/sdk';
import { startServer, MODEL } from './server.mjs';

let server, client;
before(async () => {
  server = await startServer();
  client = new Anthropic({ baseURL: server.url, apiKey: 'unused', maxRetries: 0, timeout: 60000 });
});

const STORY = 'Once upon a time, there was a little girl named Lily. She loved to play outside.';
const QUESTION = { type: 'text', text: 'What did Lily love?' };

// What the server renders for a document (docs/server.md, "Anthropic's Messages API").
function rendered({ title, context, text }) {
  return '<document>\n' + (title !== undefined ? `<source>${title}</source>\n` : '') +
    (context !== undefined ? `<document_context>${context}</document_context>\n` : '') +
    `<document_content>\n${text}\n</document_content>\n</document>\n`;
}

async function count(content) {
  return (await client.messages.countTokens({ model: MODEL, messages: [{ role: 'user', content }] })).input_tokens;
}

test('a text-source document counts and answers as its rendering sent as text', async () => {
  const doc = {
    type: 'document', source: { type: 'text', media_type: 'text/plain', data: STORY },
    title: 'Lily', context: 'A short story.', citations: { enabled: false },
  };
  const asText = { type: 'text', text: rendered({ title: 'Lily', context: 'A short story.', text: STORY }) };
  const withDoc = await count([doc, QUESTION]);
  assert.equal(withDoc, await count([asText, QUESTION]));
  // The document's text is in the prompt: at least its own tokens more than the question alone.
  const storyTokens = (await server.tokenize({ content: STORY, add_special: false })).length;
  assert.ok(withDoc >= (await count([QUESTION])) + storyTokens, `${withDoc} tokens`);
  // A generation sees the same prompt: the same greedy answer and input_tokens.
  const ask = (content) => client.messages.create({ model: MODEL, max_tokens: 12, temperature: 0, messages: [{ role: 'user', content }] });
  const [a, b] = [await ask([doc, QUESTION]), await ask([asText, QUESTION])];
  assert.equal(a.usage.input_tokens + a.usage.cache_read_input_tokens, withDoc);
  assert.equal(a.content[0].text, b.content[0].text);
  // Streamed too.
  const stream = client.messages.stream({ model: MODEL, max_tokens: 12, temperature: 0, messages: [{ role: 'user', content: [doc, QUESTION] }] });
  assert.equal((await stream.finalMessage()).content[0].text, a.content[0].text);
});

test('a content-source document: its text blocks one per line; the title is optional', async () => {
  const doc = {
    type: 'document',
    source: { type: 'content', content: [{ type: 'text', text: 'Lily had a dog.' }, { type: 'text', text: 'The dog was brown.' }] },
  };
  const asText = { type: 'text', text: rendered({ text: 'Lily had a dog.\nThe dog was brown.' }) };
  assert.equal(await count([doc, QUESTION]), await count([asText, QUESTION]));
  // Leaving the document's text out of its rendering is another prompt.
  assert.notEqual(await count([doc, QUESTION]), await count([{ type: 'text', text: rendered({ text: 'Lily had a dog.' }) }, QUESTION]));
});

test('PDF, URL and file sources, images and citations are a 400 naming them', async () => {
  const cases = [
    [{ type: 'document', source: { type: 'base64', media_type: 'application/pdf', data: 'JVBERi0=' } }, /'base64'/, 'source.type'],
    [{ type: 'document', source: { type: 'url', url: 'https://example.com/a.pdf' } }, /'url'/, 'source.type'],
    [{ type: 'image', source: { type: 'base64', media_type: 'image/png', data: 'iVBORw0KGgo=' } }, /'image' with a 'base64' source/, 'type'],
    [{ type: 'document', source: { type: 'text', media_type: 'text/plain', data: 'x' }, citations: { enabled: true } }, /citations/, 'citations.enabled'],
  ];
  for (const [block, pattern, param] of cases) {
    await assert.rejects(
      client.messages.create({ model: MODEL, max_tokens: 4, messages: [{ role: 'user', content: [block, QUESTION] }] }),
      (e) => {
        assert.ok(e instanceof Anthropic.BadRequestError, `${e.constructor.name}: ${e.message}`);
        assert.equal(e.error?.error?.type, 'invalid_request_error');
        assert.match(e.error.error.message, pattern);
        // Anthropic's error has no param: the message names the field.
        assert.ok(e.error.error.message.includes(`'messages[0].content[0].${param}'`), e.error.error.message);
        return true;
      });
  }
});
