/**
 * Rewrite the admin API's route table in docs/reference/admin-api.md from the route definitions
 * (src/admin/routes.ts). test/unit/routes-table.test.ts fails while the two differ.
 * Run: node --import tsx scripts/routes-table.ts
 */
import { readFileSync, writeFileSync } from 'node:fs';
import { routesTable } from '../src/admin/routes.js';

const path = new URL('../docs/reference/admin-api.md', import.meta.url);
const doc = readFileSync(path, 'utf8');
const block = /(<!-- routes-table:start -->)[\s\S]*?(<!-- routes-table:end -->)/;
if (!block.test(doc))
  throw new Error('docs/reference/admin-api.md has no <!-- routes-table:start --> … <!-- routes-table:end --> block');
writeFileSync(
  path,
  doc.replace(block, (_, start: string, end: string) => `${start}\n${routesTable()}\n${end}`),
);
