import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { pino } from 'pino';
import { ManualClock } from '../../src/manual-clock.js';
import { defineJob, type JobOptions } from '../../src/jobs/define-job.js';
import { JobRegistry } from '../../src/jobs/job-registry.js';
import type { DeliverableRun, RunDelivery } from '../../src/jobs/run-delivery.js';
import type { Lease } from '../../src/locks/lease.js';
import { FireLoop } from '../../src/scheduler/fire-loop.js';
import { MemoryLedger } from '../support/memory-ledger.js';

const T0 = Date.UTC(2026, 0, 1, 0, 0, 0);
const iso = (ms: number) => new Date(ms).toISOString();

class RecordingDelivery implements RunDelivery {
  readonly enqueued: DeliverableRun[] = [];
  readonly cancelled: bigint[] = [];
  async enqueue(runs: DeliverableRun[]) {
    this.enqueued.push(...runs);
  }
  async cancel(runIds: bigint[]) {
    this.cancelled.push(...runIds);
  }
}

function setup(jobs: Partial<JobOptions>[], options: { token?: bigint; start?: number } = {}) {
  const clock = new ManualClock(options.start ?? T0 + 500);
  const ledger = new MemoryLedger();
  const delivery = new RecordingDelivery();
  const lease: Lease = { name: 'l', holder: 'me', token: options.token ?? 5n, ttlMs: 10_000, safetyMarginMs: 1000, deadline: Infinity };
  const stepDowns: string[] = [];
  const registry = new JobRegistry(
    jobs.map((j, i) => defineJob({ name: `job${i}`, schedule: '* * * * * *', handler: () => {}, ...j } as JobOptions)),
  );
  const loop = new FireLoop({
    registry,
    ledger,
    delivery,
    leadership: { lease: () => lease, stepDown: (why) => stepDowns.push(why) },
    clock,
    logger: pino({ level: 'silent' }),
    replicaId: 'me',
    fenceResource: 'scheduler/l',
    outboxIntervalMs: 1000,
  });
  const missed: { job: string; times: Date[] }[] = [];
  const skipped: { job: string; at: Date; reason: string }[] = [];
  loop.on('fire:missed', (job, times) => missed.push({ job, times }));
  loop.on('fire:skipped', (job, at, reason) => skipped.push({ job, at, reason }));
  const abort = new AbortController();
  return { clock, ledger, delivery, loop, stepDowns, missed, skipped, abort, lead: () => loop.lead(abort.signal) };
}

describe('FireLoop (driven clock)', () => {
  it('fires each scheduled instant exactly once, at the instant, with one timer for all jobs', async () => {
    const t = setup([{}, { schedule: '*/2 * * * * *' }]);
    await t.lead();
    await t.clock.advance(10_000);
    t.abort.abort();
    assert.deepEqual(
      t.ledger.of('job0').map((r) => iso(r.scheduledAt.getTime())),
      Array.from({ length: 10 }, (_, i) => iso(T0 + (i + 1) * 1000)),
    );
    assert.deepEqual(
      t.ledger.of('job1').map((r) => iso(r.scheduledAt.getTime())),
      Array.from({ length: 5 }, (_, i) => iso(T0 + (i + 1) * 2000)),
    );
    assert.equal(t.delivery.enqueued.length, 15, 'every committed fire was delivered');
    assert.ok(t.clock.pending <= 2, `one fire timer (plus the outbox timer), found ${t.clock.pending} timers`);
  });

  it('after an election, misfire "all" catches up every missed time inside the window', async () => {
    const t = setup([{ misfire: 'all', catchUpWindowMs: 5000 }]);
    t.ledger.runs.push({ id: 999n, job: 'job0', scheduledAt: new Date(T0 - 10_000), trigger: 'schedule', leaderToken: 1n, state: 'completed', enqueued: true });
    await t.lead();
    const catchup = t.ledger.runs.filter((r) => r.trigger === 'catchup').map((r) => iso(r.scheduledAt.getTime()));
    assert.deepEqual(catchup, [-4000, -3000, -2000, -1000, 0].map((d) => iso(T0 + d)));
    assert.equal(t.missed.length, 1);
    assert.equal(t.missed[0]!.times.length, 5, 'the five older than the window are reported missed');
  });

  it('misfire "latest" fires once; "skip" fires none; both report the rest as missed', async () => {
    for (const policy of ['latest', 'skip'] as const) {
      const t = setup([{ misfire: policy, misfireGraceMs: 0 }]);
      t.ledger.runs.push({ id: 999n, job: 'job0', scheduledAt: new Date(T0 - 10_000), trigger: 'schedule', leaderToken: 1n, state: 'completed', enqueued: true });
      await t.lead();
      const catchup = t.ledger.runs.filter((r) => r.trigger === 'catchup').map((r) => iso(r.scheduledAt.getTime()));
      assert.deepEqual(catchup, policy === 'latest' ? [iso(T0)] : [], policy);
      const missedCount = t.missed.reduce((n, m) => n + m.times.length, 0);
      assert.equal(missedCount, policy === 'latest' ? 9 : 10, `${policy}: missed count (10 instants were due)`);
    }
  });

  it('overlap "skip": no new run while the previous is active; the skipped fire is recorded', async () => {
    const t = setup([{ overlap: 'skip' }]);
    await t.lead();
    await t.clock.advance(3000);
    const runs = t.ledger.of('job0');
    assert.deepEqual(runs.map((r) => r.state), ['pending', 'skipped', 'skipped']);
    assert.equal(t.skipped.length, 2);
    assert.match(t.skipped[0]!.reason, /overlap "skip"/);
    t.ledger.finish(runs[0]!.id);
    await t.clock.advance(1000);
    assert.equal(t.ledger.of('job0').at(-1)!.state, 'pending', 'fires again once the job is idle');
    assert.equal(t.delivery.enqueued.length, 2, 'skipped fires are never delivered');
  });

  it('overlap "queue": one run waits behind the active one and is delivered when it finishes', async () => {
    const t = setup([{ overlap: 'queue' }]);
    await t.lead();
    await t.clock.advance(3000);
    const runs = t.ledger.of('job0');
    assert.deepEqual(runs.map((r) => r.state), ['pending', 'pending', 'skipped']);
    assert.deepEqual(t.delivery.enqueued.map((r) => r.runId), [runs[0]!.id], 'the queued run is held back');
    t.ledger.finish(runs[0]!.id);
    await t.loop.sweepOutbox();
    assert.deepEqual(t.delivery.enqueued.map((r) => r.runId), [runs[0]!.id, runs[1]!.id]);
  });

  it('overlap "replace": the active run is cancelled through delivery, the new one fires', async () => {
    const t = setup([{ overlap: 'replace' }]);
    await t.lead();
    await t.clock.advance(2000);
    const runs = t.ledger.of('job0');
    assert.deepEqual(runs.map((r) => r.state), ['cancelled', 'pending']);
    assert.deepEqual(t.delivery.cancelled, [runs[0]!.id]);
  });

  it('a paused job records skipped fires and delivers nothing; a manual trigger still runs', async () => {
    const t = setup([{}]);
    t.ledger.paused.add('job0');
    await t.lead();
    await t.clock.advance(2000);
    assert.deepEqual(t.ledger.of('job0').map((r) => r.state), ['skipped', 'skipped']);
    assert.equal(t.delivery.enqueued.length, 0);
    const manual = await t.loop.trigger('job0');
    assert.equal(manual.state, 'pending');
    assert.equal(t.delivery.enqueued.length, 1);
  });

  it('a newer token in the fence: the loop steps down at election and commits nothing', async () => {
    const t = setup([{}], { token: 3n });
    t.ledger.fences.set('scheduler/l', 4n);
    const refused: bigint[] = [];
    t.loop.on('fire:refused', (err) => refused.push(err.token));
    await t.lead();
    await t.clock.advance(3000);
    assert.equal(t.ledger.runs.length, 0);
    assert.deepEqual(refused, [3n]);
    assert.equal(t.stepDowns.length, 1);
    assert.match(t.stepDowns[0]!, /fence refused/);
  });

  it('wall clock jumps: backwards never fires a time twice, forwards catches up the skipped seconds', async () => {
    const t = setup([{}]);
    const dupes: number[] = [];
    t.loop.on('fire:duplicate', (n) => dupes.push(n));
    await t.lead();
    await t.clock.advance(5000);
    t.clock.jumpWall(-3000);
    await t.clock.advance(5000);
    const times = t.ledger.of('job0').map((r) => r.scheduledAt.getTime());
    assert.equal(new Set(times).size, times.length, 'no scheduled time twice');
    t.clock.jumpWall(10_000);
    await t.clock.advance(1000);
    const after = t.ledger.of('job0').map((r) => r.scheduledAt.getTime()).sort((a, b) => a - b);
    for (let i = 1; i < after.length; i++) assert.equal(after[i]! - after[i - 1]!, 1000, `gap before ${iso(after[i]!)}`);
  });
});
