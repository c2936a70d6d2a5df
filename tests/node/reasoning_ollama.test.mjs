// Reasoning models through Ollama's API, read by the real ollama client: the tiny Qwen3 with its
// real template and vocabulary (reasoning_model.mjs), its output forced by the routes' `grammar`
// extension. Asserted: `think` true gives message.thinking (/api/chat) and thinking
// (/api/generate) beside the answer, streamed lines adding up to the same; `think` false switches
// Qwen3's enable_thinking off and leaves the text unsplit; thinking sent back in an assistant
// message reaches the template; /api/show lists the "thinking" capability; a think level is a 400.
// Mutations caught (each made in the code, seen failing here, reverted): the stream's splitter
// not fed (no streamed thinking); `think` not passed to the template (false renders the prompt
// of true); an assistant's thinking not read (the prompt with it is as long as without).
import { test, before } from 'node:test';
import assert from 'node:assert/strict';
import { Ollama } from 'ollama';
import { startReasoningServer, exactly, MODEL, THINKING, ANSWER, OUTPUT } from './reasoning_model.mjs';

let server, ollama;
before(async () => {
  server = await startReasoningServer();
  ollama = new Ollama({ host: server.url });
});

const USER = [{ role: 'user', content: 'What is 2+2?' }];
const common = { model: MODEL, options: { temperature: 0, num_predict: 256 }, grammar: exactly(OUTPUT) };

test('/api/chat: think true gives message.thinking and the answer, streamed the same', async () => {
  const r = await ollama.chat({ ...common, messages: USER, think: true, stream: false });
  assert.equal(r.message.thinking, THINKING);
  assert.equal(r.message.content, ANSWER);
  assert.equal(r.done_reason, 'stop');
  let thinking = '';
  let content = '';
  let thinkingLines = 0;
  for await (const part of await ollama.chat({ ...common, messages: USER, think: true, stream: true })) {
    if (part.message.thinking) {
      thinking += part.message.thinking;
      thinkingLines++;
      assert.equal(content, '', 'the thinking comes before the answer');
    }
    content += part.message.content;
  }
  assert.equal(thinking, THINKING);
  assert.equal(content, ANSWER);
  assert.ok(thinkingLines > 1, 'the thinking streams in pieces');
  // Without `think` the template's default holds (Qwen3 thinks) and the text is split all the same.
  const unset = await ollama.chat({ ...common, messages: USER, stream: false });
  assert.equal(unset.message.thinking, THINKING);
  assert.equal(unset.prompt_eval_count, r.prompt_eval_count);
});

test('/api/generate: thinking beside the response, streamed the same', async () => {
  const r = await ollama.generate({ ...common, prompt: 'What is 2+2?', think: true, stream: false });
  assert.equal(r.thinking, THINKING);
  assert.equal(r.response, ANSWER);
  let thinking = '';
  let response = '';
  for await (const part of await ollama.generate({ ...common, prompt: 'What is 2+2?', think: true, stream: true })) {
    thinking += part.thinking ?? '';
    response += part.response;
  }
  assert.equal(thinking, THINKING);
  assert.equal(response, ANSWER);
});

test('think false: enable_thinking false in the prompt, and the text is not split', async () => {
  const on = await ollama.chat({ ...common, messages: USER, think: true, stream: false });
  const off = await ollama.chat({ ...common, messages: USER, think: false, stream: false });
  const added = await server.tokenize({ content: '<think>\n\n</think>\n\n', add_special: false });
  assert.equal(off.prompt_eval_count, on.prompt_eval_count + added.length);
  assert.equal(off.message.thinking, undefined);
  assert.equal(off.message.content, OUTPUT);
});

test("an assistant's thinking sent back reaches the template", async () => {
  const call = { function: { name: 'add', arguments: { a: 2, b: 2 } } };
  const tools = [{ type: 'function', function: { name: 'add', description: 'Adds',
    parameters: { type: 'object', properties: { a: { type: 'integer' }, b: { type: 'integer' } } } } }];
  const turn = (extra) => [...USER, { role: 'assistant', content: '', tool_calls: [call], ...extra },
    { role: 'tool', content: '4', tool_name: 'add' }];
  const ask = (messages) => ollama.chat({ ...common, tools, messages, think: true, stream: false,
    options: { temperature: 0, num_predict: 1 }, grammar: undefined });
  const without = await ask(turn({}));
  const withIt = await ask(turn({ thinking: 'Use the tool.' }));
  const added = await server.tokenize({ content: '<think>\nUse the tool.\n</think>\n\n', add_special: false });
  assert.equal(withIt.prompt_eval_count, without.prompt_eval_count + added.length);
});

test('/api/show lists thinking; a think level is a 400 naming think', async () => {
  const show = await ollama.show({ model: MODEL });
  assert.ok(show.capabilities.includes('thinking'), JSON.stringify(show.capabilities));
  await assert.rejects(ollama.chat({ ...common, messages: USER, think: 'high', stream: false }),
    (e) => e.status_code === 400 && /think/.test(e.error));
  await assert.rejects(ollama.chat({ ...common, messages: USER, grammar: 'root ::= (', stream: false }),
    (e) => e.status_code === 400 && /grammar/.test(e.error));
  assert.ok(server.alive());
});
