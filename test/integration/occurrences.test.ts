/**
 * Every due instant accounted for (issue 28), against the real ledger with a driven clock: the
 * fire loop records missed instants as ranges in its catch-up's commit and opens schedule eras,
 * and the reader answers each instant (fired, skipped with who and why, missed with the outage and
 * the tenure, not yet due) with none unanswered.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { pino } from 'pino';
import { defineJob, type JobOptions } from '../../src/jobs/define-job.js';
import { JobRegistry } from '../../src/jobs/job-registry.js';
import { Ledger } from '../../src/ledger/ledger.js';
import { countUnanswered, readOccurrences } from '../../src/ledger/occurrence-reads.js';
import { explainAgainstChecker } from '../../src/drill/explain-check.js';
import type { Lease } from '../../src/locks/lease.js';
import { FireLoop } from '../../src/scheduler/firing/fire-loop.js';
import { unansweredCheck } from '../../src/scheduler/chores/ledger-checks.js';
import { ManualClock } from '../support/manual-clock.js';
import { createTestDatabase, type TestDatabase } from '../support/postgres-database.js';

const S = 1000;
const DAY = 86_400 * S;

describe('occurrences (real PostgreSQL, driven clock)', () => {
  let db: TestDatabase;
  let ledger: Ledger;
  let fence = 0;
  before(async () => {
    db = await createTestDatabase();
    ledger = new Ledger(db.pool);
  });
  after(async () => {
    await db.drop();
  });

  /** A leader of `jobs` with its own fence resource per test, under `token`. */
  function leader(jobs: Partial<JobOptions>[], clock: ManualClock, token: bigint, replicaId: string, resource: string) {
    const registry = new JobRegistry(
      jobs.map((j) => defineJob({ name: 'job', schedule: '* * * * * *', handler: () => {}, ...j })),
    );
    const lease: Lease = {
      name: 'l',
      holder: replicaId,
      token,
      ttlMs: 10_000,
      safetyMarginMs: 1000,
      deadline: Infinity,
    };
    const loop = new FireLoop({
      registry,
      ledger: ledger.fires,
      delivery: { enqueue: async () => {}, cancel: async () => {} },
      leadership: { lease: () => lease, stepDown: () => {} },
      clock,
      logger: pino({ level: 'silent' }),
      replicaId,
      fenceResource: resource,
      outboxIntervalMs: 3_600_000,
    });
    const tenure = new AbortController();
    return {
      lead: () => loop.lead(tenure.signal),
      /** Advance `seconds` one tick at a time. */
      run: async (seconds: number) => {
        for (let i = 0; i < seconds; i++) {
          await clock.advance(S);
          await loop.tick();
        }
      },
      stop: () => tenure.abort(),
    };
  }
  const newFence = () => `scheduler/occ${++fence}`;
  const read = (job: string, from: number, to: number, now: number) =>
    readOccurrences(db.pool, ledger.tables, { job, from: new Date(from), to: new Date(to), now: new Date(now) });

  it('a per-second job with the leader down a day past its window: ONE missed row, and explain shows it', async () => {
    const T0 = Date.UTC(2026, 1, 1);
    const clock = new ManualClock(T0 + 500);
    const resource = newFence();
    const job = { name: 'tick', catchUpWindowMs: 10 * S };
    const a = leader([job], clock, 1n, 'r1', resource);
    await a.lead();
    await a.run(5); // fires T0+1 .. T0+5
    a.stop();
    await clock.advance(DAY);
    const b = leader([job], clock, 2n, 'r2', resource);
    const leadStarted = performance.now();
    await b.lead(); // at T0+5.5s+1d: fires the last 10 s, misses the rest
    const leadMs = performance.now() - leadStarted;
    const rows = await db.pool.query(
      `SELECT first_at, last_at, count::int AS count, count_exact, reason, outage_start, outage_end,
              leader_token::text AS token, leader_id FROM cw_missed_ranges WHERE job = 'tick'`,
    );
    assert.equal(rows.rows.length, 1, 'a day of a per-second job is one row');
    const row = rows.rows[0];
    const now = T0 + 5500 + DAY;
    assert.equal(row.reason, 'catch-up-window');
    assert.equal(row.first_at.getTime(), T0 + 6 * S);
    assert.equal(row.outage_start.getTime(), T0 + 5 * S, 'the outage starts at the last instant handled');
    assert.equal(row.outage_end.getTime(), now, 'and ends when the deciding tenure began');
    assert.deepEqual([row.token, row.leader_id, row.count_exact], ['2', 'r2', true]);
    const fired = await db.pool.query(`SELECT count(*)::int AS n FROM cw_runs WHERE job = 'tick'`);
    assert.equal(row.count + fired.rows[0].n, DAY / S + 5, 'every instant up to now fired or missed');

    const readStarted = performance.now();
    const report = await read('tick', T0 + 1, now + 60 * S, now);
    const readMs = performance.now() - readStarted;
    console.log(
      `a day's outage of a per-second job: the new tenure planned and recorded it in ${leadMs.toFixed(0)} ms, ` +
        `the reader answered its ${DAY / S + 65} instants in ${readMs.toFixed(0)} ms (${report.entries.length} lines)`,
    );
    assert.deepEqual(
      report.entries.map((e) => [e.outcome, e.count]),
      [
        ['fired', 5],
        ['missed', row.count],
        ['fired', fired.rows[0].n - 5],
        ['not-yet-due', 60],
      ],
    );
    const missed = report.entries[1]!.missed!;
    assert.deepEqual(
      [missed.outageStartMs, missed.outageEndMs, missed.leaderToken, missed.leaderId],
      [T0 + 5 * S, now, '2', 'r2'],
    );
    const unanswered = await countUnanswered(db.pool, ledger.tables, ['tick'], {
      from: new Date(T0),
      to: new Date(now - 2 * S),
      now: new Date(now),
    });
    assert.equal(unanswered.total, 0);
    b.stop();
  });

  it('a hole in the ledger (a run deleted behind its back) is unanswered, and counted', async () => {
    const T0 = Date.UTC(2026, 1, 3);
    const clock = new ManualClock(T0 + 500);
    const a = leader([{ name: 'holey' }], clock, 1n, 'r1', newFence());
    await a.lead();
    await a.run(10);
    a.stop();
    await db.pool.query(`DELETE FROM cw_runs WHERE job = 'holey' AND scheduled_at = $1`, [new Date(T0 + 4 * S)]);
    const now = T0 + 10_500;
    const report = await read('holey', T0 + 1, T0 + 10 * S, now);
    assert.deepEqual(
      report.entries.map((e) => [e.outcome, e.count]),
      [
        ['fired', 3],
        ['unanswered', 1],
        ['fired', 6],
      ],
    );
    const count = await countUnanswered(db.pool, ledger.tables, ['holey'], {
      from: new Date(T0),
      to: new Date(T0 + 10 * S),
      now: new Date(now),
    });
    assert.deepEqual([count.total, count.byJob.get('holey')], [1, 1]);
    // Every job the ledger accounts for in the window, as the live checker asks: the same one hole.
    const all = await countUnanswered(db.pool, ledger.tables, undefined, {
      from: new Date(T0),
      to: new Date(T0 + 10 * S),
      now: new Date(now),
    });
    assert.deepEqual([all.total, [...all.byJob.keys()]], [1, ['holey']]);
    // The leader's live ledger check asks the same question, a minute behind its clock.
    const live = unansweredCheck(
      { db: db.pool, tables: ledger.tables },
      { windowMs: 120_000, now: () => now + 60_000 },
    );
    const { findings } = await live.find(3);
    assert.deepEqual(
      findings.map((f) => [f.check, f.invariant, f.count]),
      [['unanswered-instants', 'I2', 1]],
    );
    assert.match(findings[0]!.examples[0]!, /^holey: 1 due instant\(s\) of the window have no run/);

    // The drill's comparison with the checker's history fails on the hole, and on a run the reader does not answer.
    const rows = await db.pool.query(`SELECT id::text AS id, scheduled_at FROM cw_runs WHERE job = 'holey'`);
    const history = {
      runs: rows.rows.map((r) => ({
        id: BigInt(r.id),
        job: 'holey',
        scheduledAt: r.scheduled_at.getTime() as number,
        leaderToken: 1n,
        state: 'pending',
        completedToken: null,
      })),
    };
    const expected = new Map([['holey', Array.from({ length: 10 }, (_, i) => T0 + (i + 1) * S)]]);
    const window = { from: new Date(T0 + S), to: new Date(T0 + 10 * S), now: new Date(now) };
    const check = await explainAgainstChecker(db.pool, ledger.tables, expected, window, history);
    assert.equal(check.instants, 10);
    assert.deepEqual(check.disagreements, [`holey ${new Date(T0 + 4 * S).toISOString()}: unanswered (1)`]);
    assert.match(check.line, /^explain: 10 instants, 1 disagreement\(s\) with the checker: /);
    const phantom = { runs: [...history.runs, { ...history.runs[0]!, id: 999n, scheduledAt: T0 + 4 * S }] };
    const again = await explainAgainstChecker(db.pool, ledger.tables, expected, window, phantom);
    assert.deepEqual(again.disagreements, [
      `holey ${new Date(T0 + 4 * S).toISOString()}: unanswered (1), the checker's history has 1 runs`,
    ]);
  });

  it('a pause shows skipped with who and why; an overlap skip and coalesced slots say so too', async () => {
    const T0 = Date.UTC(2026, 1, 5);
    const clock = new ManualClock(T0 + 500);
    await ledger.fires.pause('paused', { reason: 'maintenance window', by: 'admin (ann)', until: null });
    const a = leader(
      [{ name: 'paused' }, { name: 'lonely', overlap: 'skip' }, { name: 'merged', overlap: 'coalesce' }],
      clock,
      1n,
      'r1',
      newFence(),
    );
    await a.lead();
    await a.run(5); // nothing claims the runs: the first of 'lonely' and 'merged' stays active
    a.stop();
    const now = T0 + 5500;
    const paused = await read('paused', T0 + 1, T0 + 5 * S, now);
    assert.deepEqual(
      paused.entries.map((e) => [e.outcome, e.skip?.reason, e.count]),
      [['skipped', 'paused', 5]],
    );
    assert.match(paused.entries[0]!.skip!.text!, /^job is paused by admin \(ann\): maintenance window$/);
    const lonely = await read('lonely', T0 + 1, T0 + 5 * S, now);
    assert.deepEqual(
      lonely.entries.map((e) => [e.outcome, e.skip?.reason, e.count]),
      [
        ['fired', undefined, 1],
        ['skipped', 'overlap-skip', 4],
      ],
    );
    const merged = await read('merged', T0 + 1, T0 + 5 * S, now);
    assert.deepEqual(
      merged.entries.map((e) => [e.outcome, e.skip?.reason, e.count]),
      [
        ['fired', undefined, 2],
        ['skipped', 'coalesced', 3],
      ],
    );
    await ledger.fires.setPaused('paused', false);
  });

  it('maxCatchUp: the late instants over it are one missed range naming it', async () => {
    const T0 = Date.UTC(2026, 1, 7);
    const clock = new ManualClock(T0 + 500);
    const resource = newFence();
    const job = { name: 'capped', maxCatchUp: 2, catchUpWindowMs: 60 * S };
    const a = leader([job], clock, 1n, 'r1', resource);
    await a.lead();
    await a.run(3);
    a.stop();
    await clock.advance(20 * S);
    const b = leader([job], clock, 2n, 'r2', resource);
    await b.lead();
    b.stop();
    const rows = await db.pool.query(
      `SELECT reason, count::int AS count, first_at FROM cw_missed_ranges WHERE job = 'capped' ORDER BY first_at`,
    );
    assert.deepEqual(
      rows.rows.map((r) => [r.reason, r.count]),
      [['max-catch-up', 20 - 2 - 1]],
      '20 s down: the 2 newest late slots and the on-time one fire, the rest are missed',
    );
    const now = T0 + 23_500;
    const report = await read('capped', T0 + 1, now, now);
    assert.deepEqual(
      report.entries.map((e) => [e.outcome, e.missed?.reason, e.count]),
      [
        ['fired', undefined, 3],
        ['missed', 'max-catch-up', 17],
        ['fired', undefined, 3],
      ],
    );
  });

  it('a schedule change opens a new era at the last fire; each era answers for its own instants', async () => {
    const T0 = Date.UTC(2026, 1, 9);
    const clock = new ManualClock(T0 + 500);
    const resource = newFence();
    const a = leader([{ name: 'changing' }], clock, 1n, 'r1', resource);
    await a.lead();
    await a.run(4);
    a.stop();
    const b = leader([{ name: 'changing', schedule: '*/10 * * * * *' }], clock, 2n, 'r2', resource);
    await b.lead();
    await b.run(26); // to T0+30.5s: fires T0+10, 20, 30
    b.stop();
    const eras = await db.pool.query(
      `SELECT expression, from_at, to_at, leader_token::text AS token FROM cw_schedule_eras WHERE job = 'changing' ORDER BY from_at`,
    );
    assert.deepEqual(
      eras.rows.map((e) => [
        e.expression,
        e.from_at.getTime() - T0,
        e.to_at === null ? null : e.to_at.getTime() - T0,
        e.token,
      ]),
      [
        ['* * * * * *', 500, 4 * S, '1'],
        ['*/10 * * * * *', 4 * S, null, '2'],
      ],
    );
    const again = leader([{ name: 'changing', schedule: '*/10 * * * * *' }], clock, 3n, 'r3', resource);
    await again.lead();
    again.stop();
    const count = await db.pool.query(`SELECT count(*)::int AS n FROM cw_schedule_eras WHERE job = 'changing'`);
    assert.equal(count.rows[0].n, 2, 'an unchanged schedule opens no era');
    const now = T0 + 30_500;
    const report = await read('changing', T0 + 1, T0 + 40 * S, now);
    assert.deepEqual(
      report.entries.map((e) => [e.outcome, (e.firstMs - T0) / S, e.count]),
      [
        ['fired', 1, 7],
        ['not-yet-due', 40, 1],
      ],
    );
  });

  it('a leader that read the eras before its predecessor opened the same schedule opens nothing: one era, not two', async () => {
    const T0 = Date.UTC(2026, 1, 10);
    const resource = newFence();
    const era = (expression: string, fromMs: number) => ({
      job: 'raced',
      expression,
      timezone: 'UTC',
      dst: 'first/shift',
      from: new Date(T0 + fromMs),
    });
    await ledger.fires.advanceFence(resource, 1n);
    await ledger.fires.openNewEras([era('* * * * * *', 0)], { fenceResource: resource, token: 1n, replicaId: 'r1' });
    // The schedule is updated as the leadership changes: the old leader opens its era...
    await ledger.fires.openNewEras([era('*/2 * * * * *', 3 * S)], {
      fenceResource: resource,
      token: 1n,
      replicaId: 'r1',
    });
    // ...and the next, which read the open eras before that, asks for the same schedule's era.
    await ledger.fires.advanceFence(resource, 2n);
    await ledger.fires.openNewEras([era('*/2 * * * * *', 5 * S)], {
      fenceResource: resource,
      token: 2n,
      replicaId: 'r2',
    });
    const eras = await db.pool.query(
      `SELECT expression, from_at, to_at FROM cw_schedule_eras WHERE job = 'raced' ORDER BY from_at`,
    );
    assert.deepEqual(
      eras.rows.map((e) => [e.expression, e.from_at.getTime() - T0, e.to_at === null ? null : e.to_at.getTime() - T0]),
      [
        ['* * * * * *', 0, 3 * S],
        ['*/2 * * * * *', 3 * S, null],
      ],
    );
  });

  it('the first tenure opens an era for every job, more than one statement holds (6,000 jobs)', async () => {
    const T0 = Date.UTC(2026, 1, 11);
    const clock = new ManualClock(T0 + 500);
    const jobs = Array.from({ length: 6000 }, (_, i) => ({ name: `many-${i}`, schedule: '0 0 * * *' }));
    const a = leader(jobs, clock, 1n, 'r1', newFence());
    await a.lead();
    a.stop();
    const n = await db.pool.query(
      `SELECT count(*)::int AS n, count(DISTINCT job)::int AS d, min(from_at) AS f FROM cw_schedule_eras
       WHERE job LIKE 'many-%' AND to_at IS NULL`,
    );
    assert.deepEqual([n.rows[0].n, n.rows[0].d, n.rows[0].f.getTime()], [6000, 6000, T0 + 500]);
  });

  it('the reader looks at no more than 10,000 instants one by one, and says where to go on (10,001 runs)', async () => {
    const T0 = Date.UTC(2026, 1, 13);
    const clock = new ManualClock(T0 - 500);
    const a = leader([{ name: 'busy' }], clock, 1n, 'r1', newFence());
    await a.lead(); // opens its era at T0 - 500
    a.stop();
    await db.pool.query(
      `INSERT INTO cw_runs (job, scheduled_at, trigger, leader_token, leader_id, state, finished_at)
       SELECT 'busy', $1::timestamptz + s * interval '1 second', 'schedule', 1, 'r1', 'completed', now()
       FROM generate_series(0, 10000) AS s`,
      [new Date(T0)],
    );
    await db.pool.query(`INSERT INTO cw_job_state (job, last_scheduled_at) VALUES ('busy', $1)`, [
      new Date(T0 + 10_000 * S),
    ]);
    const now = T0 + 10_001 * S;
    const started = performance.now();
    const report = await read('busy', T0, now, now);
    const readMs = performance.now() - started;
    assert.deepEqual(
      report.entries.map((e) => [e.outcome, e.count]),
      [['fired', 10_000]],
    );
    assert.equal(report.examined, 10_000);
    assert.equal(report.truncatedAfterMs, T0 + 9_999 * S, 'the next call goes on after the last instant answered');
    const countStarted = performance.now();
    const count = await countUnanswered(db.pool, ledger.tables, ['busy'], {
      from: new Date(T0),
      to: new Date(T0 + 2_000 * S),
      now: new Date(now),
    });
    const countMs = performance.now() - countStarted;
    assert.equal(count.total, 0);
    console.log(
      `10,000 instants with a run each: read in ${readMs.toFixed(0)} ms; ` +
        `the live checker's count over 2,000 of them in ${countMs.toFixed(0)} ms`,
    );
  });
});
