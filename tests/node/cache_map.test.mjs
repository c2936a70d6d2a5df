// The per-request cache map ("cache_map": true), the prefix tree route (GET /v1/cache/tree) and
// the web page's routes (GET /, /ui/*), on stories260K.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { startServer, MODEL, STORY, BLOCK, commonPrefix, expectedCached } from './server.mjs';

const here = path.dirname(fileURLToPath(import.meta.url));
const STORY_SCHEMA = fs.readFileSync(path.join(here, '..', '..', 'examples', 'story', 'story.xml'), 'utf8');

const sum = (runs) => runs.reduce((a, r) => a + r.length, 0);

// Each run starts where the previous one ended, and the runs cover prompt and completion.
function checkShape(map, usage) {
  let at = 0;
  for (const r of map.runs) {
    assert.equal(r.start, at);
    assert.ok(r.length > 0);
    at += r.length;
  }
  assert.equal(at, usage.prompt_tokens + usage.completion_tokens);
  assert.equal(map.pieces.length, at);
  assert.equal(map.prompt_tokens, usage.prompt_tokens);
  assert.equal(map.cached_tokens, usage.prompt_tokens_details.cached_tokens);
  assert.equal(map.block_size, BLOCK);
}

test('a second chat with the same system prompt shows a RAM prefix run of the cached length', async () => {
  const s = await startServer();
  const system = { role: 'system', content: STORY };
  const ask = (q) => s.json('POST', '/v1/chat/completions', {
    model: MODEL, messages: [system, { role: 'user', content: q }], max_tokens: 6, temperature: 0,
    cache_map: true,
  });
  const first = await ask('What did Lily find?');
  assert.equal(first.status, 200, first.text);
  checkShape(first.body.cache_map, first.body.usage);
  assert.deepEqual(first.body.cache_map.runs.map((r) => r.source), ['computed', 'generated']);

  const second = await ask('Who was with her?');
  assert.equal(second.status, 200, second.text);
  const map = second.body.cache_map;
  checkShape(map, second.body.usage);
  const a = await s.tokenize({ messages: [system, { role: 'user', content: 'What did Lily find?' }], add_generation_prompt: true });
  const b = await s.tokenize({ messages: [system, { role: 'user', content: 'Who was with her?' }], add_generation_prompt: true });
  const cached = expectedCached(commonPrefix(a, b), b.length);
  assert.ok(cached >= 4 * BLOCK, `the system prompt shares ${cached} tokens`);
  assert.deepEqual(map.runs[0], { source: 'ram', start: 0, length: cached });
  assert.equal(map.runs[1].source, 'computed');
  assert.equal(map.runs[1].length, b.length - cached);
  assert.equal(map.runs[2].source, 'generated');
  assert.equal(map.computed_tokens, b.length - cached);
  assert.ok(map.recompute_estimate_ms >= map.ttft_ms * 0.5);
  // The pieces are the tokens' text: the prompt's join into the rendered transcript.
  assert.ok(map.pieces.slice(0, b.length).join('').includes('Who was with her?'));

  // Without asking there is no map; a non-boolean is refused.
  const plain = await s.json('POST', '/v1/completions', { model: MODEL, prompt: 'Hi', max_tokens: 2 });
  assert.equal(plain.body.cache_map, undefined);
  const bad = await s.json('POST', '/v1/completions', { model: MODEL, prompt: 'Hi', cache_map: 'yes' });
  assert.equal(bad.status, 400);
  assert.equal(bad.body.error.param, 'cache_map');
});

test('a streamed response carries the map on its finishing chunk', async () => {
  const s = await startServer();
  const body = { model: MODEL, prompt: STORY, max_tokens: 5, temperature: 0, stream: true, cache_map: true,
                 stream_options: { include_usage: true } };
  await s.json('POST', '/v1/completions', { ...body, stream: false });
  const res = await fetch(s.url + '/v1/completions', {
    method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body),
  });
  const events = (await res.text()).split('\n\n').filter((e) => e.startsWith('data: {'))
      .map((e) => JSON.parse(e.slice(6)));
  const finish = events.find((e) => e.choices?.[0]?.finish_reason);
  const usage = events.find((e) => e.usage)?.usage;
  assert.ok(finish.cache_map, 'the finishing chunk has the map');
  checkShape(finish.cache_map, usage);
  assert.equal(finish.cache_map.runs[0].source, 'ram');
  assert.equal(finish.cache_map.runs[0].length, usage.prompt_tokens_details.cached_tokens);
  assert.equal(events.filter((e) => e.cache_map).length, 1);
});

test('prefix blocks read back from the disk tier show as disk', async () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'pc-map-'));
  try {
    const req = { model: MODEL, prompt: STORY + ' The end.', max_tokens: 2, temperature: 0, cache_map: true };
    const a = await startServer(['--cache-dir', dir]);
    assert.equal((await a.json('POST', '/v1/completions', req)).status, 200);
    await a.stop();  // writes the cache to disk
    const b = await startServer(['--cache-dir', dir]);
    // Before any request the blocks are on disk only: the tree lists them from their files, as
    // one chain whose tokens are the prompt's leading tokens.
    const tokens = await b.tokenize({ prompt: req.prompt });
    const disk = (await b.json('GET', '/v1/cache/tree')).body.data;
    assert.ok(disk.length >= 2, `${disk.length} disk-only blocks listed`);
    const byKey = new Map(disk.map((x) => [x.key, x]));
    for (const x of disk) {
      assert.equal(x.in_ram, false);
      assert.equal(x.on_disk, true);
      assert.equal(x.kind, 'disk');
      const parent = byKey.get(x.parent);
      assert.equal(x.depth, x.parent === null ? 0 : parent.depth + parent.tokens.length);
      if (x.depth + x.tokens.length <= tokens.length) {
        assert.deepEqual(x.tokens, tokens.slice(x.depth, x.depth + x.tokens.length));
      }
    }
    const r = await b.json('POST', '/v1/completions', req);
    assert.equal(r.status, 200, r.text);
    const map = r.body.cache_map;
    checkShape(map, r.body.usage);
    assert.equal(map.runs[0].source, 'disk');
    assert.equal(map.runs[0].length, r.body.usage.prompt_tokens_details.cached_tokens);
    // Now in RAM: the same prompt again is a RAM hit.
    const again = await b.json('POST', '/v1/completions', req);
    assert.equal(again.body.cache_map.runs[0].source, 'ram');
    const loaded = new Map((await b.json('GET', '/v1/cache/tree')).body.data.map((x) => [x.key, x]));
    for (const x of disk) {
      assert.equal(loaded.get(x.key)?.in_ram, true, 'a hit loaded it into RAM');
      assert.equal(loaded.get(x.key).kind, 'prefix');
    }
  } finally {
    fs.rmSync(dir, { recursive: true, force: true });
  }
});

test("a schema's modules show as module runs, by position", async () => {
  const s = await startServer();
  const loaded = await s.json('POST', '/v1/schemas', STORY_SCHEMA, { 'content-type': 'application/xml' });
  assert.equal(loaded.status, 200, loaded.text);
  const r = await s.json('POST', '/v1/completions', {
    model: MODEL, max_tokens: 4, temperature: 0, cache_map: true,
    prompt: '<prompt schema="story"><tim/><lake/><find thing=" big box"/><![CDATA[\nOne day,]]></prompt>',
  });
  assert.equal(r.status, 200, r.text);
  const map = r.body.cache_map;
  checkShape(map, r.body.usage);
  const of = (src) => sum(map.runs.filter((x) => x.source === src));
  assert.equal(of('module'), r.body.usage.prompt_tokens_details.cached_tokens);
  assert.equal(of('computed'), r.body.timings.computed_tokens);
  assert.equal(map.positions.length, r.body.usage.prompt_tokens);
  assert.ok(map.positions.every((p, i) => i === 0 || p > map.positions[i - 1]), 'positions ascend');
  assert.ok(map.positions[map.positions.length - 1] >= loaded.body.total_length, 'new text after the schema');
  // The argument (computed) sits inside the find module's range.
  const find = loaded.body.modules.find((m) => m.name === 'find');
  const inFind = map.positions.map((p, i) => [p, i]).filter(([p]) => p >= find.start && p < find.end);
  const src = [];
  for (const run of map.runs) for (let k = 0; k < run.length; ++k) src.push(run.source);
  assert.ok(inFind.some(([, i]) => src[i] === 'computed') && inFind.some(([, i]) => src[i] === 'module'));
});

test('GET /v1/cache/tree lists blocks with parents; pin by tokens, evict by key', async () => {
  const s = await startServer();
  const client = s.client();
  // Two prompts that share the story and go on for blocks of their own: a fork.
  const dog = ' The dog ran to the park and played with a red ball all day long until the sun went down.';
  const cat = ' A small cat sat on the wall and looked at the birds in the tall green tree for hours.';
  await client.completions.create({ model: MODEL, prompt: STORY + dog, max_tokens: 2 });
  await client.completions.create({ model: MODEL, prompt: STORY + cat, max_tokens: 2 });
  const t = await s.json('GET', '/v1/cache/tree');
  assert.equal(t.status, 200, t.text);
  const blocks = t.body.data;
  const byKey = new Map(blocks.map((b) => [b.key, b]));
  const roots = blocks.filter((b) => b.parent === null);
  assert.equal(roots.length, 1);
  assert.equal(roots[0].depth, 0);
  for (const b of blocks) {
    assert.equal(b.tokens.length, BLOCK);
    assert.equal(b.kind, 'prefix');
    if (b.parent !== null) assert.equal(b.depth, byKey.get(b.parent).depth + BLOCK);
  }
  assert.ok(roots[0].hits >= 1, 'the second prompt reused the first block');
  assert.ok(roots[0].text.length > 0);
  // Two chains share the story: some block has two children.
  const children = new Map();
  for (const b of blocks) if (b.parent) children.set(b.parent, (children.get(b.parent) || 0) + 1);
  assert.ok([...children.values()].some((n) => n === 2), 'the chains fork');

  // The page pins a block with its chain's tokens.
  const chain = [];
  let deepest = blocks.reduce((a, b) => (b.depth > a.depth ? b : a));
  for (let b = deepest; b; b = b.parent && byKey.get(b.parent)) chain.unshift(...b.tokens);
  const pin = await s.json('POST', '/v1/cache/pin', { prompt: chain });
  assert.equal(pin.status, 200, pin.text);
  const pinned = (await s.json('GET', '/v1/cache/tree')).body.data;
  assert.ok(pinned.find((b) => b.key === deepest.key).pinned);
  assert.equal((await s.json('POST', '/v1/cache/unpin', { prompt: chain })).status, 200);
  const leaf = pinned.find((b) => !pinned.some((c) => c.parent === b.key));
  assert.equal((await s.json('DELETE', '/v1/cache/' + leaf.key)).status, 200);
  assert.ok(!(await s.json('GET', '/v1/cache/tree')).body.data.some((b) => b.key === leaf.key));
});

test('GET / serves the page and its assets, without the API key', async () => {
  const s = await startServer(['--api-key', 'sekret']);
  const page = await fetch(s.url + '/');
  assert.equal(page.status, 200);
  assert.match(page.headers.get('content-type'), /text\/html/);
  assert.match(page.headers.get('content-security-policy'), /default-src 'self'/);
  const html = await page.text();
  assert.match(html, /<script type="module" src="\/ui\/app.js">/);
  const js = await fetch(s.url + '/ui/app.js');
  assert.equal(js.status, 200);
  assert.match(js.headers.get('content-type'), /javascript/);
  const cfg = await (await fetch(s.url + '/ui/config.json')).json();
  assert.deepEqual(cfg, { api_key_required: true });
  assert.equal((await fetch(s.url + '/ui/nothing.js')).status, 404);
  assert.equal((await fetch(s.url + '/ui/app.js', { method: 'POST' })).status, 405);
  // The API behind it still needs the key.
  assert.equal((await s.json('GET', '/v1/cache/tree')).status, 401);
  assert.equal((await s.json('GET', '/v1/cache/tree', undefined, { authorization: 'Bearer sekret' })).status, 200);
});
