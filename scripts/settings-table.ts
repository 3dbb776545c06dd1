/**
 * Rewrite the configuration table in docs/reference/configuration.md from the setting definitions
 * (src/config/settings.ts). test/admin/config.test.ts fails while the two differ.
 * Run: node --import tsx scripts/settings-table.ts
 */
import { readFileSync, writeFileSync } from 'node:fs';
import { settingsTable } from '../src/config/settings.js';

const path = new URL('../docs/reference/configuration.md', import.meta.url);
const page = readFileSync(path, 'utf8');
const block = /(<!-- settings-table:start -->)[\s\S]*?(<!-- settings-table:end -->)/;
if (!block.test(page))
  throw new Error(
    'docs/reference/configuration.md has no <!-- settings-table:start --> … <!-- settings-table:end --> block',
  );
writeFileSync(
  path,
  page.replace(block, (_, start: string, end: string) => `${start}\n${settingsTable()}\n${end}`),
);
