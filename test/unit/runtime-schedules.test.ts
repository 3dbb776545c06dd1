/**
 * Runtime schedules on the driven clock: a schedule's slots are those of the version in effect at
 * each instant (the boundary rule), the fire loop moves a changed schedule's timer without firing
 * a slot twice or skipping one, and the input is validated exactly like defineJob.
 */
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { pino } from 'pino';
import { ManualClock } from '../support/manual-clock.js';
import { MemoryLedger } from '../support/memory-ledger.js';
import { defineJob } from '../../src/jobs/define-job.js';
import { JobRegistry } from '../../src/jobs/job-registry.js';
import { validateSchedule } from '../../src/jobs/schedule-input.js';
import type { ScheduleSpec, ScheduleVersion } from '../../src/ledger/schedule-ledger.js';
import type { FireRequest } from '../../src/ledger/fire-ledger.js';
import { FireLoop } from '../../src/scheduler/firing/fire-loop.js';
import { FireQueue } from '../../src/scheduler/firing/fire-queue.js';
import {
  RuntimeSchedules,
  handlerOf,
  runtimeJob,
  withRuntimeSchedules,
} from '../../src/scheduler/schedules/runtime-schedules.js';
import type { Lease } from '../../src/locks/lease.js';

const T0 = Date.UTC(2026, 0, 1, 0, 0, 0);
const S = 1000;

function spec(cron: string, o: Partial<ScheduleSpec> = {}): ScheduleSpec {
  return {
    handler: 'report',
    cron,
    timezone: 'UTC',
    misfire: 'all',
    overlap: 'allow',
    catchUpWindowMs: 300_000,
    misfireGraceMs: 1000,
    payload: null,
    paused: false,
    ...o,
  };
}

/** The versions a ledger would hold, in memory: what the schedule source reads. */
class Versions {
  readonly list: ScheduleVersion[] = [];
  change(id: string, at: number, after: ScheduleSpec | null): void {
    const version = this.list.filter((v) => v.scheduleId === id).length + 1;
    this.list.push({
      scheduleId: id,
      version,
      action: version === 1 ? 'create' : after === null ? 'delete' : 'update',
      actor: 'admin',
      effectiveAt: new Date(at),
      before: null,
      after,
    });
  }
  async versionsInEffect(since: Date, ids?: string[]) {
    return this.list.filter((v, i) => {
      if (ids && !ids.includes(v.scheduleId)) return false;
      const next = this.list.slice(i + 1).find((n) => n.scheduleId === v.scheduleId);
      return !next || next.effectiveAt > since;
    });
  }
  async currentVersions() {
    const m = new Map<string, number>();
    for (const v of this.list) m.set(v.scheduleId, v.version);
    return m;
  }
  async fingerprint() {
    return String(this.list.length);
  }
  /** The commit's re-check, as the SQL makes it: the named version is the one in effect at the slot. */
  accepts(f: FireRequest): boolean {
    if (!f.schedule) return true;
    const cur = this.list.filter((v) => v.scheduleId === f.schedule!.id && v.effectiveAt <= f.scheduledAt).at(-1);
    return cur?.version === f.schedule.version && cur.after !== null && !cur.after.paused;
  }
}

/** The memory ledger with the commit's schedule re-check (acceptScheduleFires in SQL). */
function checked(ledger: MemoryLedger, versions: Versions): MemoryLedger {
  const wrapped = Object.create(ledger) as MemoryLedger;
  wrapped.commitFires = (fires, leader) =>
    ledger.commitFires(
      fires.filter((f) => versions.accepts(f)),
      leader,
    );
  return wrapped;
}

describe('a runtime schedule made of versions', () => {
  it('has, in each version’s span, that version’s slots: none while paused, none after the delete', () => {
    const at = (s: number) => new Date(T0 + s * S);
    const versions: ScheduleVersion[] = [
      {
        scheduleId: 'a',
        version: 1,
        action: 'create',
        actor: 'admin',
        effectiveAt: at(5),
        before: null,
        after: spec('*/10 * * * * *'),
      },
      {
        scheduleId: 'a',
        version: 2,
        action: 'update',
        actor: 'admin',
        effectiveAt: at(35),
        before: null,
        after: spec('*/15 * * * * *'),
      },
      {
        scheduleId: 'a',
        version: 3,
        action: 'pause',
        actor: 'admin',
        effectiveAt: at(70),
        before: null,
        after: spec('*/15 * * * * *', { paused: true }),
      },
      {
        scheduleId: 'a',
        version: 4,
        action: 'resume',
        actor: 'admin',
        effectiveAt: at(100),
        before: null,
        after: spec('*/15 * * * * *'),
      },
      {
        scheduleId: 'a',
        version: 5,
        action: 'delete',
        actor: 'admin',
        effectiveAt: at(135),
        before: null,
        after: null,
      },
    ];
    const job = runtimeJob('a', versions)!;
    assert.equal(job.name, 'report/a');
    assert.equal(handlerOf(job.name), 'report');
    const slots = job.schedule.between(T0 - 1, T0 + 1000 * S).map((t) => (t - T0) / S);
    // v1: 10, 20, 30; v2 (from 35): 45, 60; paused 70-100; v4 (from 100): 105, 120; deleted at 135.
    assert.deepEqual(slots, [10, 20, 30, 45, 60, 105, 120]);
    assert.equal(job.schedule.versionFor(T0 + 30 * S)?.version, 1);
    assert.equal(job.schedule.versionFor(T0 + 45 * S)?.version, 2);
    assert.equal(job.schedule.versionFor(T0 + 40 * S), undefined, '40 is a slot of v1, but v2 is in effect');
    assert.equal(job.schedule.versionFor(T0 + 75 * S), undefined, 'paused');
    assert.equal(job.schedule.nextAfter(T0 + 120 * S), null, 'deleted');
  });

  it('validates like defineJob: same messages for a bad cron or zone; an update keeps what it does not name', () => {
    const registry = new JobRegistry([defineJob({ name: 'report', schedule: '@daily', handler: () => {} })]);
    const messageOf = (fn: () => unknown) => {
      try {
        fn();
      } catch (err) {
        return (err as Error).message;
      }
      return 'no error';
    };
    for (const bad of [{ schedule: '61 * * * *' }, { schedule: '* * * * *', timezone: 'Mars/Olympus' }]) {
      assert.equal(
        messageOf(() => validateSchedule('acme', { handler: 'report', ...bad }, registry)),
        messageOf(() => defineJob({ name: 'acme', handler: () => {}, ...bad })),
      );
    }
    assert.match(
      messageOf(() => validateSchedule('acme', { handler: 'nope', schedule: '@daily' }, registry)),
      /nope/,
    );
    assert.match(
      messageOf(() => validateSchedule('a/b', { handler: 'report', schedule: '@daily' }, registry)),
      /id/,
    );
    const base = validateSchedule('acme', { handler: 'report', schedule: '@daily', payload: { a: 1 } }, registry);
    const updated = validateSchedule('acme', { timezone: 'Europe/Berlin' }, registry, base);
    assert.deepEqual(updated, { ...base, timezone: 'Europe/Berlin' });
  });

  it('FireQueue.remove takes a job’s entries out and keeps the heap ordered', () => {
    const q = new FireQueue();
    for (const [i, at] of [50, 10, 40, 20, 30].entries()) q.push({ at, job: `j${i % 2}`, after: at - 1 });
    const removed = q.remove(new Set(['j1']));
    assert.deepEqual([...removed], [['j1', 19]]);
    assert.deepEqual(
      q.popDue(100).map((e) => e.at),
      [30, 40, 50],
    );
  });
});

describe('the fire loop with runtime schedules (driven clock)', () => {
  it('picks up create, update, pause, resume and delete: each slot once, under the version in effect', async () => {
    const clock = new ManualClock(T0 + 500);
    const ledger = new MemoryLedger();
    const versions = new Versions();
    const code = new JobRegistry([defineJob({ name: 'report', schedule: '0 0 1 1 *', handler: () => {} })]);
    const schedules = new RuntimeSchedules({ code, ledger: versions, clock, logger: pino({ level: 'silent' }) });
    const lease: Lease = {
      name: 'l',
      holder: 'me',
      token: 5n,
      ttlMs: 10_000,
      safetyMarginMs: 1000,
      deadline: Infinity,
    };
    const loop = new FireLoop({
      registry: schedules,
      ledger: withRuntimeSchedules(checked(ledger, versions), schedules),
      delivery: { enqueue: async () => {}, cancel: async () => {} },
      leadership: { lease: () => lease, stepDown: () => {} },
      clock,
      logger: pino({ level: 'silent' }),
      replicaId: 'me',
      fenceResource: 'scheduler/l',
    });
    await schedules.load();
    await loop.lead(new AbortController().signal);
    /** A change heard `lagMs` after it took effect, as the LISTEN would deliver it. */
    const change = async (atS: number, after: ScheduleSpec | null, lagMs = 300) => {
      await clock.advanceTo(T0 + atS * S);
      versions.change('a', T0 + atS * S, after);
      await clock.advance(lagMs);
      const names = await schedules.refresh(['a']);
      await loop.reschedule(names, () => T0 + atS * S - 1);
    };
    await change(5, spec('*/10 * * * * *', { payload: { v: 1 } }));
    // Changed at 39.9 s, heard at 40.4 s: the leader plans v1's slot at 40 s before it hears of
    // the change; the commit's re-check refuses it (v2 is in effect at 40 and has no 40); v2's 45
    // fires. The same for the delete at 134.9 s and the slot at 135 s.
    await change(39.9, spec('*/15 * * * * *', { payload: { v: 2 } }), 500);
    await change(70, spec('*/15 * * * * *', { paused: true }));
    await change(100, spec('*/15 * * * * *', { payload: { v: 2 } }));
    await change(134.9, null);
    await clock.advanceTo(T0 + 300 * S);
    loop.stop();
    const fired = ledger.of('report/a').map((r) => (r.scheduledAt.getTime() - T0) / S);
    assert.deepEqual(fired, [10, 20, 30, 45, 60, 105, 120]);
    const commits = ledger.commitLog.flatMap((c) => (c.outcome === 'committed' ? c.fires : []));
    assert.deepEqual(
      commits.filter((f) => f.job === 'report/a').map((f) => [(f.scheduledAt.getTime() - T0) / S, f.schedule?.version]),
      [
        [10, 1],
        [20, 1],
        [30, 1],
        [45, 2],
        [60, 2],
        [105, 4],
        [120, 4],
      ],
    );
  });
});
