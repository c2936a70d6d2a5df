// docs/server.md's "Routes" table lists exactly the routes the server answers: every row of the
// route table in src/server/routes.cc (pattern and method), and none it does not have. Paths in
// the doc write a captured segment as {name}; routes.cc as ([^/]+). No server is started.
// Mutation caught: a row deleted from the doc's table (and, the other way, a route added to
// routes.cc without a row).
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';

const root = fileURLToPath(new URL('../../', import.meta.url));
const routesCc = readFileSync(`${root}src/server/routes.cc`, 'utf8');
const doc = readFileSync(`${root}docs/server.md`, 'utf8');

test('docs/server.md "Routes" lists every route of src/server/routes.cc, and only those', () => {
  const table = routesCc.slice(routesCc.indexOf('kRoutes[] = {'), routesCc.indexOf('};'));
  const code = [...table.matchAll(/\{"(\/[^"]*)", "(\w+)"/g)].map((m) => `${m[2]} ${m[1]}`);
  assert.ok(code.length > 30, `${code.length} routes parsed from routes.cc`);
  const start = doc.indexOf('\n## Routes\n');
  assert.ok(start >= 0, 'docs/server.md has no "## Routes" section');
  const section = doc.slice(start + 1, doc.indexOf('\n## ', start + 1));
  const listed = [...section.matchAll(/^\| `(\w+)` \| `([^`]+)` \|/gm)]
    .map((m) => `${m[1]} ${m[2].replace(/\{[^}]+\}/g, '([^/]+)')}`);
  assert.deepEqual([...listed].sort(), [...code].sort());
  // Each row says its status and links a section that exists.
  for (const row of section.split('\n').filter((l) => /^\| `\w+` \|/.test(l))) {
    assert.match(row, /\| (implemented|partial)/, row);
    const anchor = row.match(/\]\(#([^)]+)\) \|$/);
    assert.ok(anchor, row);
    const slugs = [...doc.matchAll(/^#{2,4} (.*)$/gm)]
      .map((h) => h[1].toLowerCase().replace(/[^\w\- ]/g, '').replaceAll(' ', '-'));
    assert.ok(slugs.includes(anchor[1]), `${row}: no heading for #${anchor[1]}`);
  }
});
