/**
 * The layers of src/ import only downward (issue 10): a newcomer can read each folder knowing
 * nothing above it. Files at the top of src/ (clock, errors, small helpers) are below everything;
 * index.ts, the public API, is above everything. And no two files import each other, directly or
 * through others (issue 24), type-only imports included: a cycle means neither can be read first.
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

/** Each file of src/ with the files it imports (relative imports and re-exports, `import type` too). */
const graph = new Map<string, string[]>();
for (const file of sources(src)) {
  const text = readFileSync(file, 'utf8');
  const targets = [...text.matchAll(/^(?:import|export)(?:[^'"]*\sfrom)?\s*'(\.[^']+)'/gm)].map((m) =>
    resolve(dirname(file), m[1]!.replace(/\.js$/, '.ts')),
  );
  graph.set(file, targets);
}

it('every import in src/ points to the same layer or a lower one', () => {
  const upward: string[] = [];
  for (const [file, targets] of graph) {
    for (const target of targets) {
      if (layerOf(target) > layerOf(file)) upward.push(`${relative(src, file)} imports ${relative(src, target)}`);
    }
  }
  assert.deepEqual(upward, []);
});

/**
 * Tarjan's strongly connected components: every group of files that reach each other through
 * imports. About 20 lines; madge or dependency-cruiser would pull in dozens of packages for them.
 */
function importCycles(edges: Map<string, string[]>): string[][] {
  const index = new Map<string, number>();
  const low = new Map<string, number>();
  const stack: string[] = [];
  const onStack = new Set<string>();
  const cycles: string[][] = [];
  const visit = (file: string) => {
    index.set(file, index.size);
    low.set(file, index.get(file)!);
    stack.push(file);
    onStack.add(file);
    for (const next of edges.get(file) ?? []) {
      if (!edges.has(next)) continue; // not a file of src/ (a typo the compiler reports)
      if (!index.has(next)) visit(next);
      if (onStack.has(next)) low.set(file, Math.min(low.get(file)!, low.get(next)!));
    }
    if (low.get(file) !== index.get(file)) return;
    const group: string[] = [];
    let member: string;
    do {
      member = stack.pop()!;
      onStack.delete(member);
      group.push(relative(src, member));
    } while (member !== file);
    if (group.length > 1 || edges.get(file)!.includes(file)) cycles.push(group.sort());
  };
  for (const file of edges.keys()) if (!index.has(file)) visit(file);
  return cycles;
}

it('no file in src/ imports itself through others (type-only imports count)', () => {
  assert.deepEqual(importCycles(graph), []);
});

it('the cycle check finds a cycle, a self-import and a cycle hidden behind a chain', () => {
  const g = (edges: Record<string, string[]>) =>
    new Map(Object.entries(edges).map(([f, to]) => [join(src, f), to.map((t) => join(src, t))]));
  assert.deepEqual(importCycles(g({ 'a.ts': ['b.ts'], 'b.ts': ['c.ts'], 'c.ts': [] })), []);
  assert.deepEqual(importCycles(g({ 'a.ts': ['a.ts'] })), [['a.ts']]);
  assert.deepEqual(
    importCycles(g({ 'x.ts': ['a.ts'], 'a.ts': ['b.ts'], 'b.ts': ['c.ts'], 'c.ts': ['a.ts', 'd.ts'], 'd.ts': [] })),
    [['a.ts', 'b.ts', 'c.ts']],
  );
});

// The composition root only wires (issue 24): features land in the parts it wires, not in it.
it('the replica, the composition root, stays under 300 lines', () => {
  const lines = readFileSync(join(src, 'replica', 'replica.ts'), 'utf8').split('\n').length;
  assert.ok(lines < 300, `src/replica/replica.ts has ${lines} lines: move the new part into a module of its own`);
});
