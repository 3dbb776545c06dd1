/**
 * Issue 16, the policies a job chooses, on the driven clock and the in-memory ledger: catch-up
 * bounded in count (maxCatchUp), pause with a reason and an expiry (and its lift by the leader,
 * fenced, once), the bounded overlap queue, and ctx.isCatchUp / ctx.lateByMs.
 */
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { pino } from 'pino';
import { ManualClock } from '../support/manual-clock.js';
import { MemoryLedger } from '../support/memory-ledger.js';
import { MemoryRunLedger } from '../support/memory-run-ledger.js';
import { defineJob, type JobOptions } from '../../src/jobs/define-job.js';
import type { JobContext } from '../../src/jobs/job-context.js';
import { JobRegistry } from '../../src/jobs/job-registry.js';
import { RunExecutor } from '../../src/jobs/run-executor.js';
import type { Lease } from '../../src/locks/lease.js';
import { FireLoop } from '../../src/scheduler/firing/fire-loop.js';
import { PauseExpiry } from '../../src/scheduler/chores/pause-expiry.js';
import type { DeliverableRun } from '../../src/scheduler/firing/run-delivery.js';
import { InvalidConfigError } from '../../src/errors.js';

const T0 = Date.UTC(2026, 0, 1, 12, 0, 0);
const MINUTE = 60_000;
const iso = (ms: number) => new Date(ms).toISOString();

function setup(jobs: Partial<JobOptions>[], start = T0 + 500) {
  const clock = new ManualClock(start);
  const ledger = new MemoryLedger();
  ledger.now = () => clock.now();
  const delivered: DeliverableRun[] = [];
  let token = 5n;
  const lease = (): Lease => ({
    name: 'l',
    holder: 'me',
    token,
    ttlMs: 10_000,
    safetyMarginMs: 1000,
    deadline: Infinity,
  });
  const stepDowns: string[] = [];
  const leadership = { lease, stepDown: (why: string) => void stepDowns.push(why) };
  const registry = new JobRegistry(
    jobs.map((j, i) => defineJob({ name: `job${i}`, schedule: '* * * * *', handler: () => {}, ...j })),
  );
  const loop = new FireLoop({
    registry,
    ledger,
    delivery: { enqueue: async (runs) => void delivered.push(...runs), cancel: async () => {} },
    leadership,
    clock,
    logger: pino({ level: 'silent' }),
    replicaId: 'me',
    fenceResource: 'scheduler/l',
  });
  const missed: { job: string; count: number; reason: string }[] = [];
  const skipped: { job: string; at: string; reason: string }[] = [];
  loop.on('fire:missed', (job, _times, reason, count) => missed.push({ job, count, reason }));
  loop.on('fire:skipped', (job, at, reason) => skipped.push({ job, at: at.toISOString(), reason }));
  const abort = new AbortController();
  const expiry = new PauseExpiry({
    ledger,
    leadership,
    clock,
    logger: pino({ level: 'silent' }),
    fenceResource: 'scheduler/l',
  });
  return {
    clock,
    ledger,
    loop,
    delivered,
    missed,
    skipped,
    stepDowns,
    expiry,
    registry,
    setToken: (t: bigint) => void (token = t),
    lead: () => loop.lead(abort.signal),
    stop: () => abort.abort(),
    /** Slots of a job in the ledger: [scheduledAt, state, trigger]. */
    slots: (job = 'job0') => ledger.of(job).map((r) => [iso(r.scheduledAt.getTime()), r.state, r.trigger]),
  };
}

/** The job fired last at `lastMs` (a run in the ledger, as a previous leader left it). */
function firedAt(ledger: MemoryLedger, job: string, lastMs: number): void {
  ledger.runs.push({
    id: 9_999n,
    job,
    scheduledAt: new Date(lastMs),
    trigger: 'schedule',
    leaderToken: 1n,
    state: 'completed',
    enqueued: true,
  });
}

describe('maxCatchUp: catch-up bounded in count', () => {
  it('a day-long outage of an every-minute job fires the newest maxCatchUp late slots at once; the rest are missed', async () => {
    const t = setup([{ catchUpWindowMs: 24 * 3600_000, maxCatchUp: 5 }]);
    firedAt(t.ledger, 'job0', T0 - 24 * 3600_000); // the last fire a day ago: 1,440 slots since
    await t.lead();
    const fired = t.ledger.of('job0').filter((r) => r.id !== 9_999n);
    // T0 itself is on time (500 ms ago, inside the 1 s grace) and not counted in the cap.
    assert.deepEqual(
      fired.map((r) => [iso(r.scheduledAt.getTime()), r.trigger]),
      [-5, -4, -3, -2, -1, 0].map((m) => [iso(T0 + m * MINUTE), 'catchup']),
    );
    assert.equal(t.missed.length, 1);
    assert.equal(t.missed[0]!.count, 1440 - 6, 'every other slot of the day is reported missed');
    assert.equal(t.delivered.length, 6, 'all at once, not spread');
    // Never fired twice: the next minute fires on time, once.
    await t.clock.advance(MINUTE);
    assert.equal(t.ledger.of('job0').filter((r) => r.scheduledAt.getTime() === T0 + MINUTE).length, 1);
    t.stop();
  });

  it('maxCatchUp 0 fires no late slot; the default (1,000) keeps every slot inside the window', async () => {
    const none = setup([{ catchUpWindowMs: 10 * MINUTE, maxCatchUp: 0, misfireGraceMs: 0 }], T0);
    firedAt(none.ledger, 'job0', T0 - 10 * MINUTE);
    await none.lead();
    assert.deepEqual(none.slots().slice(1), [[iso(T0), 'pending', 'catchup']], 'only the slot due now (no lateness)');
    none.stop();
    const all = setup([{ catchUpWindowMs: 10 * MINUTE }]);
    firedAt(all.ledger, 'job0', T0 - 10 * MINUTE);
    await all.lead();
    assert.equal(all.ledger.of('job0').length - 1, 10);
    assert.equal(all.registry.require('job0').maxCatchUp, 1000);
    all.stop();
  });

  it('a late tick (a blocked loop) marks its late slots catch-up and caps them too', async () => {
    const t = setup([{ catchUpWindowMs: 10 * MINUTE, maxCatchUp: 2 }]);
    await t.lead();
    t.clock.jumpWall(5 * MINUTE); // the wall clock leaps: five slots are due at once
    await t.clock.advance(MINUTE);
    const late = t.slots().filter(([, , trigger]) => trigger === 'catchup');
    assert.equal(late.length, 2, JSON.stringify(t.slots()));
    assert.ok(t.missed.some((m) => m.count >= 3));
    t.stop();
  });

  it('is validated like every option', () => {
    for (const bad of [-1, 1.5, 1001])
      assert.throws(
        () => defineJob({ name: 'x', schedule: '* * * * *', handler: () => {}, maxCatchUp: bad }),
        (e) => e instanceof InvalidConfigError && e.setting === 'job "x": maxCatchUp',
      );
    const bad = { dstRepeat: 'twice', dstGap: 'later', overlapQueueMax: 0 } as const;
    for (const [key, value] of Object.entries(bad))
      assert.throws(
        () => defineJob({ name: 'x', schedule: '* * * * *', handler: () => {}, [key]: value }),
        (e) => e instanceof InvalidConfigError && e.setting === `job "x": ${key}`,
        key,
      );
    const job = defineJob({
      name: 'x',
      schedule: '30 2 * * *',
      timezone: 'Europe/Berlin',
      handler: () => {},
      dstRepeat: 'both',
      dstGap: 'skip',
    });
    assert.deepEqual(job.schedule.dst, { repeat: 'both', gap: 'skip' });
  });
});

describe('pause with a reason and an expiry', () => {
  it('slots before `until` are recorded skipped with who, why and until; slots at or after it fire', async () => {
    const t = setup([{}]);
    await t.ledger.pause('job0', { reason: 'db migration', by: 'admin (ops)', until: new Date(T0 + 2 * MINUTE) });
    await t.lead();
    await t.clock.advance(3 * MINUTE);
    assert.deepEqual(t.slots(), [
      [iso(T0 + MINUTE), 'skipped', 'schedule'],
      [iso(T0 + 2 * MINUTE), 'pending', 'schedule'],
      [iso(T0 + 3 * MINUTE), 'pending', 'schedule'],
    ]);
    assert.equal(t.skipped[0]!.reason, `job is paused by admin (ops) until ${iso(T0 + 2 * MINUTE)}: db migration`);
    t.stop();
  });

  it('the boundary slot fires even if nobody lifted the pause yet; the leader lifts it once, under its fence', async () => {
    const t = setup([{}]);
    await t.ledger.pause('job0', { reason: null, by: 'admin', until: new Date(T0 + MINUTE) });
    await t.lead();
    await t.clock.advance(MINUTE);
    assert.deepEqual(t.slots(), [[iso(T0 + MINUTE), 'pending', 'schedule']]);
    assert.equal(t.ledger.paused.has('job0'), true, 'not lifted yet, and the slot fired anyway');
    const lifted = await t.expiry.liftExpired();
    assert.deepEqual(
      lifted.map((p) => p.job),
      ['job0'],
    );
    assert.deepEqual(await t.expiry.liftExpired(), [], 'lifted once');
    assert.equal(t.ledger.paused.has('job0'), false);
    t.stop();
  });

  it('a pause not yet expired is kept; a stale leader lifts nothing and steps down', async () => {
    const t = setup([{}]);
    await t.ledger.pause('job0', { reason: 'x', by: 'admin', until: new Date(T0 + 10 * MINUTE) });
    await t.ledger.advanceFence('scheduler/l', 5n);
    assert.deepEqual(await t.expiry.liftExpired(), []);
    await t.clock.advance(10 * MINUTE);
    await t.ledger.advanceFence('scheduler/l', 9n); // a newer leader exists
    assert.deepEqual(await t.expiry.liftExpired(), []);
    assert.equal(t.ledger.paused.has('job0'), true);
    assert.match(t.stepDowns[0]!, /fence refused token 5/);
    t.setToken(9n);
    assert.deepEqual(
      (await t.expiry.liftExpired()).map((p) => p.job),
      ['job0'],
    );
  });

  it('a pause without `until` holds every slot; a manual trigger still runs', async () => {
    const t = setup([{}]);
    await t.ledger.pause('job0', { reason: 'hold', by: 'admin', until: null });
    await t.lead();
    await t.clock.advance(2 * MINUTE);
    assert.deepEqual(
      t.slots().map(([, s]) => s),
      ['skipped', 'skipped'],
    );
    assert.equal((await t.loop.trigger('job0')).state, 'pending');
    t.stop();
  });
});

describe('overlap "queue" with a bound', () => {
  it('at most overlapQueueMax runs wait; the rest are recorded skipped with the reason; waiting runs go one at a time, in order', async () => {
    const t = setup([{ overlap: 'queue', overlapQueueMax: 2 }]);
    await t.lead();
    await t.clock.advance(4 * MINUTE);
    assert.deepEqual(
      t.slots().map(([, s]) => s),
      ['pending', 'pending', 'pending', 'skipped'],
    );
    assert.equal(t.skipped[0]!.reason, 'overlap "queue": 2 runs already waiting (overlapQueueMax 2)');
    assert.equal(t.delivered.length, 1, 'only the first is handed to the queue');
    const [first, second, third] = t.ledger.of('job0');
    t.ledger.finish(first!.id);
    await t.loop.sweepOutbox();
    assert.deepEqual(
      t.delivered.map((r) => r.runId),
      [first!.id, second!.id],
      'the oldest waiting run, alone',
    );
    t.ledger.finish(second!.id);
    await t.loop.sweepOutbox();
    assert.deepEqual(
      t.delivered.map((r) => r.runId),
      [first!.id, second!.id, third!.id],
    );
    t.stop();
  });

  it('the default bound is 1 (one waiting run)', async () => {
    const t = setup([{ overlap: 'queue' }]);
    await t.lead();
    await t.clock.advance(3 * MINUTE);
    assert.deepEqual(
      t.slots().map(([, s]) => s),
      ['pending', 'pending', 'skipped'],
    );
    assert.match(t.skipped[0]!.reason, /1 run already waiting/);
    t.stop();
  });
});

describe('overlap "coalesce"', () => {
  it('one run waits behind the active one and stands for every later slot; its handler sees how many', async () => {
    const t = setup([{ overlap: 'coalesce' }]);
    await t.lead();
    await t.clock.advance(4 * MINUTE);
    const [first, waiting, third, fourth] = t.ledger.of('job0');
    assert.deepEqual(
      t.slots().map(([, s]) => s),
      ['pending', 'pending', 'skipped', 'skipped'],
    );
    for (const r of [third!, fourth!]) assert.equal(r.error, `overlap "coalesce": run ${waiting!.id} stands for it`);
    assert.equal(t.delivered.length, 1, 'the waiting run is held');
    t.ledger.finish(first!.id);
    await t.loop.sweepOutbox();
    assert.deepEqual(
      t.delivered.map((r) => r.runId),
      [first!.id, waiting!.id],
    );
    const seen: JobContext['coalesced'][] = [];
    const executor = new RunExecutor({
      ledger: new MemoryRunLedger(t.ledger),
      registry: new JobRegistry([
        defineJob({ name: 'job0', schedule: '* * * * *', handler: (ctx) => void seen.push(ctx.coalesced) }),
      ]),
      replicaId: 'w',
      logger: pino({ level: 'silent' }),
    });
    await executor.execute(waiting!.id, { finalAttempt: true });
    assert.deepEqual(seen, [{ count: 2, until: fourth!.scheduledAt }]);
    t.stop();
  });
});

describe('ctx.isCatchUp and ctx.lateByMs', () => {
  it('come from the run trigger and the claim time', async () => {
    const t = setup([{ catchUpWindowMs: 10 * MINUTE, maxCatchUp: 1 }]);
    firedAt(t.ledger, 'job0', T0 - 3 * MINUTE);
    await t.lead();
    await t.clock.advance(MINUTE);
    const seen: { at: string; isCatchUp: boolean; lateByMs: number }[] = [];
    const runs = new MemoryRunLedger(t.ledger);
    const handler = (ctx: JobContext) =>
      void seen.push({ at: ctx.scheduledAt.toISOString(), isCatchUp: ctx.isCatchUp, lateByMs: ctx.lateByMs });
    const executor = new RunExecutor({
      ledger: runs,
      registry: new JobRegistry([defineJob({ name: 'job0', schedule: '* * * * *', handler })]),
      replicaId: 'w',
      logger: pino({ level: 'silent' }),
    });
    await t.clock.advance(1500);
    for (const run of t.delivered) await executor.execute(run.runId, { finalAttempt: true });
    assert.deepEqual(seen, [
      { at: iso(T0 - MINUTE), isCatchUp: true, lateByMs: 2 * MINUTE + 2000 },
      { at: iso(T0), isCatchUp: true, lateByMs: MINUTE + 2000 },
      { at: iso(T0 + MINUTE), isCatchUp: false, lateByMs: 2000 },
    ]);
    t.stop();
  });
});
