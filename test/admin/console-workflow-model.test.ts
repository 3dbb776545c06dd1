/**
 * The console's workflow run model (src/admin/console-workflow-model.js, a browser script) run in
 * node: a step's drawn state, its fan-out counts, its span from its runs' own times, what a waiting
 * step shows, and the critical path whose shares add up to the run's length.
 */
import { it } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { createContext, runInContext } from 'node:vm';

const source = readFileSync(new URL('../../src/admin/console-workflow-model.js', import.meta.url), 'utf8');
const context = createContext({});
runInContext(source, context);

interface Run {
  id: string;
  item: number | null;
  state: string;
  attempts: number;
  startedAt: string | null;
  finishedAt: string | null;
  error: string | null;
  result: string | null;
}
interface Step {
  name: string;
  needs: string[];
  mapped: boolean;
  signal?: { name: string; timeoutMs: number; onTimeout: string };
  state: string;
  itemsTotal: number | null;
  waitsFor: string | null;
  timeoutAt: string | null;
  reason: string | null;
  readyAt: string | null;
  completedAt: string | null;
  runs: Run[];
}
interface Model {
  steps: { step: Step; drawn: string; span: { start: number; end: number } | null; lines: { text: string }[] }[];
  critical: { name: string; ms: number }[];
  lengthMs: number;
}

const T0 = Date.UTC(2026, 0, 15, 12, 0, 0);
const iso = (ms: number | null) => (ms === null ? null : new Date(T0 + ms).toISOString());
const fmt = { dur: (ms: number) => `${ms}ms`, time: (v: string | null) => v ?? '-' };
/** The model as plain data (what the script made lives in the vm's realm, with its own Array). */
function model(steps: Step[], finishedAt: number | null, now: number, signals: { name: string }[] = []): Model {
  const make = context.cronwardenWorkflowModel as (v: unknown, now: number, f: typeof fmt) => Model;
  const view = { id: '1', workflow: 'w', createdAt: iso(0), finishedAt: iso(finishedAt), steps, signals };
  return JSON.parse(JSON.stringify(make(view, T0 + now, fmt))) as Model;
}

/** A run from `from` to `to` (ms after T0; null: not started or not finished). */
function run(state: string, from: number | null, to: number | null, item: number | null = null): Run {
  return {
    id: String(Math.random()),
    item,
    state,
    attempts: 1,
    startedAt: iso(from),
    finishedAt: iso(to),
    error: null,
    result: null,
  };
}
function step(
  name: string,
  needs: string[],
  state: string,
  readyAt: number | null,
  runs: Run[],
  more: Partial<Step> = {},
): Step {
  const ends = runs.map((r) => (r.finishedAt ? Date.parse(r.finishedAt) - T0 : 0));
  return {
    name,
    needs,
    mapped: false,
    state,
    itemsTotal: null,
    waitsFor: null,
    timeoutAt: null,
    reason: null,
    readyAt: iso(readyAt),
    completedAt: state === 'completed' ? iso(Math.max(readyAt ?? 0, ...ends)) : null,
    runs,
    ...more,
  };
}
const lines = (m: Model, name: string) => m.steps.find((s) => s.step.name === name)!.lines.map((l) => l.text);
const drawn = (m: Model) => Object.fromEntries(m.steps.map((s) => [s.step.name, s.drawn]));

it('counts a fan-out by its items and draws a ready step whose runs started as running', () => {
  const items = [
    ...Array.from({ length: 48 }, (_, i) => run('completed', 5, 20, i)),
    run('running', 5, null, 48),
    run('failed', 5, 30, 49),
  ];
  const m = model(
    [
      step('extract', [], 'completed', 0, [run('completed', 1, 5)]),
      step('invoice', ['extract'], 'ready', 5, items, { mapped: true, itemsTotal: 50 }),
      step('queued', ['extract'], 'ready', 5, [run('pending', null, null)]),
      step('report', ['invoice'], 'waiting', null, []),
    ],
    null,
    40,
  );
  assert.deepEqual(drawn(m), { extract: 'completed', invoice: 'running', queued: 'ready', report: 'waiting' });
  assert.deepEqual(lines(m, 'invoice'), ['⋔ invoice', 'running · 35ms', '48/50 done, 1 running, 1 failed']);
  assert.deepEqual(lines(m, 'report'), ['report', 'waiting'], 'a step not made yet has no duration');
});

it('a diamond: the critical path follows the need that ended last, and its shares add up to the run', () => {
  const m = model(
    [
      step('a', [], 'completed', 0, [run('completed', 2, 10)]),
      step('b', ['a'], 'completed', 10, [run('completed', 12, 50)]),
      step('c', ['a'], 'completed', 10, [run('completed', 11, 30)]),
      step('d', ['b', 'c'], 'completed', 50, [run('completed', 52, 60)]),
    ],
    60,
    1000,
  );
  assert.deepEqual(
    m.critical.map((c) => [c.name, c.ms]),
    [
      ['a', 10],
      ['b', 40],
      ['d', 10],
    ],
  );
  assert.equal(m.lengthMs, 60);
  assert.equal(
    m.critical.reduce((sum, c) => sum + c.ms, 0),
    m.lengthMs,
  );
});

it("a step's span comes from its runs, not from a gate a retry stamped anew", () => {
  const a = step('a', [], 'completed', 0, [run('completed', 1, 10)], { completedAt: iso(500) });
  const b = step('b', ['a'], 'completed', 10, [{ ...run('completed', 400, 520), attempts: 2 }]);
  const m = model([a, b], 520, 1000);
  assert.deepEqual(lines(m, 'a'), ['a', 'completed · 10ms']);
  assert.deepEqual(lines(m, 'b'), ['b', 'completed · 510ms', 'attempt 2']);
  assert.deepEqual(
    m.critical.map((c) => [c.name, c.ms]),
    [
      ['a', 10],
      ['b', 510],
    ],
  );
});

it('a failed run: a straggler still running is not the run length; the reason is the last line', () => {
  const m = model(
    [
      step('a', [], 'completed', 0, [run('completed', 1, 10)]),
      step('b', ['a'], 'failed', 10, [run('failed', 11, 50, 0), run('running', 11, null, 1)], {
        mapped: true,
        itemsTotal: 2,
        reason: 'step "b" failed: boom\n  at x',
      }),
    ],
    50,
    90,
  );
  assert.deepEqual(lines(m, 'b'), ['⋔ b', 'failed · 80ms', '0/2 done, 1 running, 1 failed', 'step "b" failed: boom']);
  assert.deepEqual(
    m.critical.map((c) => [c.name, c.ms]),
    [
      ['a', 10],
      ['b', 40],
    ],
  );
  assert.equal(m.lengthMs, 50);
});

it('a step waiting for a signal says which and until when; once it came, how long it waited', () => {
  const signal = { name: 'approved', timeoutMs: 600_000, onTimeout: 'fail' };
  const waiting = model(
    [
      step('a', [], 'completed', 0, [run('completed', 1, 10)]),
      step('approve', ['a'], 'waiting', null, [], { signal, waitsFor: 'approved', timeoutAt: iso(600_000) }),
    ],
    null,
    20,
  );
  assert.deepEqual(lines(waiting, 'approve'), [
    'approve',
    'waiting',
    'waits for signal "approved"',
    `until ${iso(600_000)}`,
  ]);
  const went = model(
    [
      step('a', [], 'completed', 0, [run('completed', 1, 10)]),
      step('approve', ['a'], 'completed', 70, [run('completed', 71, 75)], { signal }),
    ],
    75,
    100,
    [{ name: 'approved' }],
  );
  assert.deepEqual(lines(went, 'approve'), ['approve', 'completed · 5ms', 'waited 60ms for "approved"']);
  assert.deepEqual(
    went.critical.map((c) => [c.name, c.ms]),
    [
      ['a', 10],
      ['approve', 65],
    ],
    "the wait is the approval's share of the run",
  );
});
