/**
 * The live ledger check's pure parts: the token order over each (job, leader token) pair's first
 * and last run (what ledger-check.ts reads instead of every run) finds exactly the pairs the check
 * over every run finds, on random histories of several shards; the commit witness keeps the newest
 * claim of each stretch for a minute; the chore reports every check (0 included), logs one warning
 * only when something was found, and keeps each report.
 */
import { it } from 'node:test';
import assert from 'node:assert/strict';
import { Writable } from 'node:stream';
import { pino } from 'pino';
import { tokenRegressions, type TokenedRun } from '../../src/ledger/invariant-checks.js';
import { CommitWitness } from '../../src/ledger/commit-witness.js';
import { LedgerCheckChore, type LedgerCheckReport } from '../../src/scheduler/chores/ledger-check.js';
import { ManualClock } from '../support/manual-clock.js';

/** A seeded generator (mulberry32), so a failure replays. */
function random(seed: number): () => number {
  return () => {
    seed = (seed + 0x6d2b79f5) | 0;
    let t = Math.imul(seed ^ (seed >>> 15), 1 | seed);
    t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

/** As the window's statement: per (job, token), a run for its lowest id and one for its highest, in id order. */
function pairEnds(runs: TokenedRun[]): TokenedRun[] {
  const pairs = new Map<string, { job: string; leaderToken: bigint; min: bigint; max: bigint }>();
  for (const r of runs) {
    const key = `${r.job}\n${r.leaderToken}`;
    const p = pairs.get(key);
    if (!p) pairs.set(key, { job: r.job, leaderToken: r.leaderToken, min: r.id, max: r.id });
    else [p.min, p.max] = [p.min < r.id ? p.min : r.id, p.max > r.id ? p.max : r.id];
  }
  const ends = [...pairs.values()].flatMap((p) => [
    { id: p.min, job: p.job, leaderToken: p.leaderToken },
    ...(p.max === p.min ? [] : [{ id: p.max, job: p.job, leaderToken: p.leaderToken }]),
  ]);
  return ends.sort((a, b) => (a.id < b.id ? -1 : 1));
}

const pairsOf = (found: { run: TokenedRun }[]) => new Set(found.map((f) => `${f.run.job}\n${f.run.leaderToken}`));

it('the token order over pair ends flags exactly the (job, token) pairs the order over every run flags', () => {
  const next = random(42);
  let withRegressions = 0;
  for (let trial = 0; trial < 500; trial++) {
    const jobs = ['a', 'b', 'c', 'd', 'e'].slice(0, 1 + Math.floor(next() * 5));
    const shards = 1 + Math.floor(next() * 3);
    const shardOf = (job: string) => job.charCodeAt(0) % shards;
    // Mostly growing tokens per shard (tenures), with an occasional stale write.
    const top = new Map<number, bigint>();
    const runs: TokenedRun[] = [];
    for (let id = 1n; id <= 60n; id++) {
      const job = jobs[Math.floor(next() * jobs.length)]!;
      const shard = shardOf(job);
      let token = top.get(shard) ?? 1n;
      if (next() < 0.1) token += 1n;
      if (next() < 0.05) token -= BigInt(1 + Math.floor(next() * 3));
      else top.set(shard, token);
      runs.push({ id, job, leaderToken: token });
    }
    const full = pairsOf(tokenRegressions(runs, shardOf));
    const reduced = pairsOf(tokenRegressions(pairEnds(runs), shardOf));
    assert.deepEqual([...reduced].sort(), [...full].sort(), `trial ${trial}`);
    if (full.size > 0) withRegressions++;
  }
  assert.ok(withRegressions > 50, `only ${withRegressions} trials had a regression`);
});

it('the commit witness keeps the newest claim of each stretch, for the last stretches only', () => {
  const w = new CommitWitness({ stretchMs: 500, stretches: 4 });
  const claim = (n: number) => ({
    runId: BigInt(n),
    attempt: 1,
    token: BigInt(100 + n),
    job: 'j',
    scheduledAt: new Date(0),
  });
  w.saw(claim(1), new Date(1000));
  w.saw(claim(2), new Date(1200)); // same stretch, newer token: replaces 1
  w.saw(claim(3), new Date(1600));
  assert.deepEqual(
    w.recent().map((c) => c.runId),
    [2n, 3n],
  );
  w.saw(claim(4), new Date(3000)); // stretch 6: stretch 2 (1000-1499) is now 4 behind and goes
  assert.deepEqual(
    w.recent().map((c) => c.runId),
    [3n, 4n],
  );
  w.forget([claim(3)]);
  assert.deepEqual(
    w.recent().map((c) => c.runId),
    [4n],
  );
  // A claim returning late (older token in a stretch already holding a newer one) does not replace it.
  w.saw({ ...claim(5), token: 1n }, new Date(3100));
  assert.deepEqual(
    w.recent().map((c) => c.runId),
    [4n],
  );
});

it('the chore reports every check, warns once per round that found something, and keeps each report', async () => {
  const lines: { msg: string; ledgerCheck?: unknown }[] = [];
  const saved: LedgerCheckReport[] = [];
  let found = 0;
  const chore = new LedgerCheckChore({
    checks: [
      {
        checks: ['a', 'b'],
        find: async () => ({
          findings: [
            { check: 'a', invariant: 'I1', count: 0, examples: [] },
            { check: 'b', invariant: 'I3', count: found, examples: ['x', 'y', 'z'] },
          ],
          window: { ms: 60_000, runs: 10, capped: false },
        }),
      },
      { checks: ['c'], find: async () => ({ findings: [] }) },
    ],
    save: async (r) => void saved.push(r),
    clock: new ManualClock(Date.UTC(2026, 0, 1)),
    logger: pino(
      { level: 'warn' },
      new Writable({
        write(chunk: Buffer, _e, done) {
          lines.push(JSON.parse(chunk.toString()) as { msg: string });
          done();
        },
      }),
    ),
    examples: 2,
  });
  const clean = await chore.checkOnce();
  assert.deepEqual(clean.counts, { a: 0, b: 0, c: 0 });
  assert.equal(clean.violations, 0);
  assert.equal(clean.checkedAt, '2026-01-01T00:00:00.000Z');
  assert.equal(lines.length, 0);
  found = 3;
  const dirty = await chore.checkOnce();
  assert.deepEqual(dirty.counts, { a: 0, b: 3, c: 0 });
  assert.deepEqual(dirty.examples, { b: ['I3: x', 'I3: y'] });
  assert.equal(lines.length, 1);
  assert.equal(lines[0]!.msg, 'ledger check: 3 b in the last 60 s');
  assert.equal(saved.length, 2);
});
