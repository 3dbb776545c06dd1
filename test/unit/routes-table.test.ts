/**
 * The admin API's routes are defined once (src/admin/routes.ts): the server registers them and the
 * route table in docs/reference/admin-api.md is made from them, so the docs cannot drift.
 */
import { it } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { z } from 'zod';
import { adminRoutes, routesTable } from '../../src/admin/routes.js';

it('docs/reference/admin-api.md shows the route table the route definitions make', () => {
  const doc = readFileSync(new URL('../../docs/reference/admin-api.md', import.meta.url), 'utf8');
  const block = /<!-- routes-table:start -->\n([\s\S]*?)\n<!-- routes-table:end -->/.exec(doc)?.[1];
  assert.equal(block, routesTable(), 'regenerate it with: node --import tsx scripts/routes-table.ts');
});

it('each route is defined once, with a one-line summary; changes need the token, /api reads may, the rest are open', () => {
  const keys = adminRoutes.map((r) => `${r.method} ${r.path}`);
  assert.deepEqual(
    keys.filter((k, i) => keys.indexOf(k) !== i),
    [],
    'a method and path defined twice',
  );
  for (const r of adminRoutes) {
    assert.match(r.summary, /^[^\n|]{10,140}$/, `${r.method} ${r.path}: one line of 10-140 characters, no |`);
    const expected = r.method !== 'GET' ? 'token' : r.path.startsWith('/api/') ? 'read' : 'open';
    assert.equal(r.access, expected, `${r.method} ${r.path}`);
  }
});

it('every route with path parameters declares their schema, naming exactly the parameters of its path', () => {
  for (const r of adminRoutes) {
    const inPath = [...r.path.matchAll(/:([A-Za-z]+)/g)].map((m) => m[1]!).sort();
    const shape = r.params instanceof z.ZodObject ? Object.keys(r.params.shape).sort() : [];
    assert.deepEqual(shape, inPath, `${r.method} ${r.path}`);
  }
});
