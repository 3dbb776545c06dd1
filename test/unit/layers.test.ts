/**
 * The layers of src/ import only downward (issue 10): a newcomer can read each folder knowing
 * nothing above it. Files at the top of src/ (clock, errors, small helpers) are below everything;
 * index.ts, the public API, is above everything.
 */
import { it } from 'node:test';
import assert from 'node:assert/strict';
import { readdirSync, readFileSync } from 'node:fs';
import { dirname, join, relative, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

const src = resolve(dirname(fileURLToPath(import.meta.url)), '../../src');
const order = ['cron', 'db', 'locks', 'ledger', 'scheduler', 'jobs', 'admin', 'replica', 'config', 'drill', 'cli'];

function layerOf(file: string): number {
  const rel = relative(src, file);
  if (rel === 'index.ts') return order.length;
  const top = rel.split('/')[0]!;
  if (!rel.includes('/')) return -1;
  const rank = order.indexOf(top);
  assert.notEqual(rank, -1, `src/${top} is not a known layer: add it to the order in this test`);
  return rank;
}

function* sources(dir: string): Generator<string> {
  for (const entry of readdirSync(dir, { withFileTypes: true })) {
    const path = join(dir, entry.name);
    if (entry.isDirectory()) yield* sources(path);
    else if (entry.name.endsWith('.ts')) yield path;
  }
}

it('every import in src/ points to the same layer or a lower one', () => {
  const upward: string[] = [];
  for (const file of sources(src)) {
    const text = readFileSync(file, 'utf8');
    for (const m of text.matchAll(/^(?:import|export)[^'"]*from '(\.[^']+)'/gm)) {
      const target = resolve(dirname(file), m[1]!.replace(/\.js$/, '.ts'));
      if (layerOf(target) > layerOf(file)) upward.push(`${relative(src, file)} imports ${relative(src, target)}`);
    }
  }
  assert.deepEqual(upward, []);
});
