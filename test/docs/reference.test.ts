/**
 * The hand-written reference tables name exactly what the code has: every error class the package
 * exports is in docs/reference/errors.md (with its retryability), and every metric a replica
 * registers is in docs/reference/metrics.md, and nothing else.
 */
import { it } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import * as api from '../../src/index.js';
import { CronwardenError } from '../../src/errors.js';
import { readDoc, repoRoot } from './markdown.js';

/** `| \`Name\` | yes |` rows of a Markdown table: the first column's code span, the second cell. */
function rows(file: string): Map<string, string> {
  const out = new Map<string, string>();
  for (const m of readDoc(file).matchAll(/^\| `([^`]+)` \| ([^|]*) \|/gm)) out.set(m[1]!, m[2]!.trim());
  return out;
}

it('docs/reference/errors.md lists every exported error class, and whether it is retryable', () => {
  const classes = Object.entries(api).filter(
    ([name, v]) => typeof v === 'function' && v.prototype instanceof CronwardenError && name !== 'CronwardenError',
  );
  const documented = rows('docs/reference/errors.md');
  const problems: string[] = [];
  for (const [name, cls] of classes) {
    const row = documented.get(name);
    if (row === undefined) {
      problems.push(`${name} is not documented`);
      continue;
    }
    const retryable = retryableOf(cls as new (...args: unknown[]) => CronwardenError);
    if (retryable === undefined) problems.push(`${name}: could not be constructed to read its retryable`);
    else if (row !== (retryable ? 'yes' : 'no'))
      problems.push(`${name}: documented retryable "${row}", is ${retryable}`);
  }
  for (const name of documented.keys())
    if (!classes.some(([n]) => n === name)) problems.push(`${name} is documented but not exported`);
  assert.deepEqual(problems, []);
});

/** A class's `retryable` (a field, so it needs an instance), made with placeholder arguments. */
function retryableOf(cls: new (...args: unknown[]) => CronwardenError): boolean | undefined {
  for (const args of [
    ['x', 'y', 'z'],
    ['x', new Date(0), null],
    ['x', 1n, null],
  ]) {
    try {
      return new cls(...args).retryable;
    } catch {
      // another constructor shape
    }
  }
  return undefined;
}

it('docs/reference/metrics.md lists every metric a replica registers, and no other', () => {
  // The admin server's, and the run attempts its worker counts (attempt-metrics.ts).
  const sources = ['src/admin/metrics.ts', 'src/jobs/attempt-metrics.ts'];
  const source = sources.map((f) => readFileSync(join(repoRoot, f), 'utf8')).join('\n');
  const registered = new Set([...source.matchAll(/'(cronwarden_[a-z_]+)'/g)].map((m) => m[1]!));
  const documented = new Set([...rows('docs/reference/metrics.md').keys()].map((k) => k.replace(/\{.*$/, '')));
  assert.ok(registered.size >= 20, `only ${registered.size} metric names found in ${sources.join(', ')}`);
  assert.deepEqual([...documented].sort(), [...registered].sort());
});
