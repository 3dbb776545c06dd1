import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { pino } from 'pino';
import { setFlagsFromString } from 'node:v8';
import { runInNewContext } from 'node:vm';
import { ManualClock } from '../support/manual-clock.js';
import { defineJob, type JobOptions } from '../../src/jobs/define-job.js';
import { JobRegistry } from '../../src/jobs/job-registry.js';
import type { DeliverableRun, RunDelivery } from '../../src/scheduler/firing/run-delivery.js';
import type { Lease } from '../../src/locks/lease.js';
import { COMMIT_CHUNK, COMMIT_RETRY_MS, FireLoop, PLAN_CHUNK } from '../../src/scheduler/firing/fire-loop.js';
import { MemoryLedger } from '../support/memory-ledger.js';

setFlagsFromString('--expose-gc'); // a test below proves memory is let go

const T0 = Date.UTC(2026, 0, 1, 0, 0, 0);
const iso = (ms: number) => new Date(ms).toISOString();

class RecordingDelivery implements Pick<RunDelivery, 'enqueue' | 'cancel'> {
  readonly enqueued: DeliverableRun[] = [];
  readonly cancelled: bigint[] = [];
  onCancel: (runIds: bigint[]) => void = () => {};
  /** Fail this many enqueue calls (the queue's Redis is down). */
  failEnqueues = 0;
  async enqueue(runs: DeliverableRun[]) {
    if (this.failEnqueues > 0) {
      this.failEnqueues--;
      throw new Error('redis unavailable');
    }
    this.enqueued.push(...runs);
  }
  async cancel(runIds: bigint[]) {
    this.onCancel(runIds);
    this.cancelled.push(...runIds);
  }
}

interface LogLine {
  level: number;
  msg: string;
  job?: string;
  scheduledAt?: string;
  reason?: string;
  err?: { message: string };
}

function setup(jobs: Partial<JobOptions>[], options: { token?: bigint; start?: number } = {}) {
  const clock = new ManualClock(options.start ?? T0 + 500);
  const ledger = new MemoryLedger();
  const delivery = new RecordingDelivery();
  const lease: Lease = {
    name: 'l',
    holder: 'me',
    token: options.token ?? 5n,
    ttlMs: 10_000,
    safetyMarginMs: 1000,
    deadline: Infinity,
  };
  const stepDowns: string[] = [];
  const logs: LogLine[] = [];
  const registry = new JobRegistry(
    jobs.map((j, i) => defineJob({ name: `job${i}`, schedule: '* * * * * *', handler: () => {}, ...j })),
  );
  const loop = new FireLoop({
    registry,
    ledger,
    delivery,
    leadership: { lease: () => lease, stepDown: (why) => stepDowns.push(why) },
    clock,
    logger: pino({ level: 'info' }, { write: (line: string) => void logs.push(JSON.parse(line) as LogLine) }),
    replicaId: 'me',
    fenceResource: 'scheduler/l',
    outboxIntervalMs: 1000,
  });
  const missed: { job: string; times: Date[] }[] = [];
  const skipped: { job: string; at: Date; reason: string }[] = [];
  loop.on('fire:missed', (job, times) => missed.push({ job, times }));
  loop.on('fire:skipped', (job, at, reason) => skipped.push({ job, at, reason }));
  const abort = new AbortController();
  return {
    clock,
    ledger,
    delivery,
    loop,
    stepDowns,
    missed,
    skipped,
    logs,
    abort,
    lead: () => loop.lead(abort.signal),
  };
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
    t.ledger.runs.push({
      id: 999n,
      job: 'job0',
      scheduledAt: new Date(T0 - 10_000),
      trigger: 'schedule',
      leaderToken: 1n,
      state: 'completed',
      enqueued: true,
    });
    await t.lead();
    const catchup = t.ledger.runs.filter((r) => r.trigger === 'catchup').map((r) => iso(r.scheduledAt.getTime()));
    assert.deepEqual(
      catchup,
      [-4000, -3000, -2000, -1000, 0].map((d) => iso(T0 + d)),
    );
    assert.equal(t.missed.length, 1);
    assert.equal(t.missed[0]!.times.length, 5, 'the five older than the window are reported missed');
  });

  it('misfire "latest" fires once; "skip" fires none; both report the rest as missed', async () => {
    for (const policy of ['latest', 'skip'] as const) {
      const t = setup([{ misfire: policy, misfireGraceMs: 0 }]);
      t.ledger.runs.push({
        id: 999n,
        job: 'job0',
        scheduledAt: new Date(T0 - 10_000),
        trigger: 'schedule',
        leaderToken: 1n,
        state: 'completed',
        enqueued: true,
      });
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
    assert.deepEqual(
      runs.map((r) => r.state),
      ['pending', 'skipped', 'skipped'],
    );
    assert.equal(t.skipped.length, 2);
    assert.match(t.skipped[0]!.reason, /overlap "skip"/);
    t.ledger.finish(runs[0]!.id);
    await t.clock.advance(1000);
    assert.equal(t.ledger.of('job0').at(-1)!.state, 'pending', 'fires again once the job is idle');
    assert.equal(t.delivery.enqueued.length, 2, 'skipped fires are never delivered');
  });

  it('the outbox: fires committed while the queue is down are delivered by the next sweep, each once', async () => {
    const t = setup([{}, { schedule: '*/2 * * * * *' }]);
    const failures: string[] = [];
    t.loop.on('enqueue:failed', (err) => failures.push(err.message));
    await t.lead();
    t.delivery.failEnqueues = 2; // the next two enqueues fail: first the fire, then the sweep that follows it
    await t.clock.advance(1000);
    const committed = [...t.ledger.of('job0'), ...t.ledger.of('job1')];
    assert.equal(committed.length, 1, 'the fire is committed although the queue is down');
    assert.equal(t.delivery.enqueued.length, 0);
    assert.deepEqual(failures, ['redis unavailable']);
    await t.clock.advance(3000);
    const all = [...t.ledger.of('job0'), ...t.ledger.of('job1')].map((r) => r.id).sort();
    const delivered = t.delivery.enqueued.map((r) => r.runId).sort();
    assert.deepEqual(delivered, all, 'every committed run delivered, the early one by a later sweep');
    assert.equal(new Set(delivered).size, delivered.length, 'none delivered twice');
    assert.equal((await t.ledger.unenqueued(100, [])).length, 0, 'the outbox is empty');
  });

  it('a large tick commits in chunks, each handed to the queue; a chunk that fails is retried with the rest, none twice', async () => {
    const t = setup(Array.from({ length: 600 }, () => ({})));
    await t.lead();
    const commit = t.ledger.commitFires.bind(t.ledger);
    let calls = 0;
    t.ledger.commitFires = async (fires, leader) => {
      if (++calls === 2) throw new Error('Connection terminated unexpectedly'); // the second chunk of the first tick
      return commit(fires, leader);
    };
    await t.clock.advance(2000);
    const sizes = t.ledger.commitLog.map((c) => c.fires.length);
    assert.ok(
      sizes.every((n) => n <= COMMIT_CHUNK),
      `chunks of at most ${COMMIT_CHUNK}: ${sizes.join(', ')}`,
    );
    for (let i = 0; i < 600; i++) {
      assert.deepEqual(
        t.ledger.of(`job${i}`).map((r) => iso(r.scheduledAt.getTime())),
        [iso(T0 + 1000), iso(T0 + 2000)],
        `job${i}`,
      );
    }
    const delivered = t.delivery.enqueued.map((r) => r.runId);
    assert.equal(delivered.length, 1200, 'every run delivered');
    assert.equal(new Set(delivered).size, 1200, 'none delivered twice');
  });

  it('a tick commits two chunks at once, never two with a job in common (a job commits its fires in order)', async () => {
    /** Wrap commitFires: how many run at once, and whether two at once ever shared a job. */
    const watch = (ledger: MemoryLedger) => {
      const commit = ledger.commitFires.bind(ledger);
      const running: Set<string>[] = [];
      const seen = { most: 0, shared: 0 };
      ledger.commitFires = async (fires, leader, missed) => {
        const jobs = new Set(fires.map((f) => f.job));
        if (running.some((r) => [...jobs].some((j) => r.has(j)))) seen.shared++;
        running.push(jobs);
        seen.most = Math.max(seen.most, running.length);
        try {
          for (let i = 0; i < 5; i++) await Promise.resolve(); // a round trip: the loop may start another
          return await commit(fires, leader, missed);
        } finally {
          running.splice(running.indexOf(jobs), 1);
        }
      };
      return seen;
    };
    const many = setup(Array.from({ length: 3 * COMMIT_CHUNK }, () => ({})));
    const manyAtOnce = watch(many.ledger);
    await many.lead();
    await many.clock.advance(500);
    assert.equal(many.ledger.commitLog.length, 3, 'three chunks');
    assert.deepEqual(manyAtOnce, { most: 2, shared: 0 }, 'chunks of different jobs commit two at once');

    // One job's catch-up over two chunks: one at a time, oldest slots first.
    const slots = 2 * COMMIT_CHUNK;
    const one = setup([{ misfire: 'all', catchUpWindowMs: (slots + 10) * 1000 }]);
    one.ledger.runs.push({
      id: 1n,
      job: 'job0',
      scheduledAt: new Date(T0 - slots * 1000),
      trigger: 'schedule',
      leaderToken: 1n,
      state: 'completed',
      enqueued: true,
    });
    const oneAtOnce = watch(one.ledger);
    await one.lead();
    assert.equal(one.ledger.commitLog.length, 2, 'two chunks');
    assert.deepEqual(oneAtOnce, { most: 1, shared: 0 }, "one job's chunks commit one after another");
    const times = one.ledger.of('job0').map((r) => r.scheduledAt.getTime());
    assert.deepEqual(
      times,
      [...times].sort((a, b) => a - b),
      'committed in slot order',
    );
    assert.equal(times.length, slots + 1, 'every missed slot caught up once, after the run before them');
  });

  it('a tick plans PLAN_CHUNK due jobs at a time: a failed commit in a later plan retries only that plan and the unplanned rest', async () => {
    const jobs = PLAN_CHUNK * 2 + 500;
    const t = setup(Array.from({ length: jobs }, () => ({})));
    await t.lead();
    const commit = t.ledger.commitFires.bind(t.ledger);
    const pausesRead = t.ledger.pauses.bind(t.ledger);
    let policyReads = 0;
    t.ledger.pauses = () => {
      policyReads++;
      return pausesRead();
    };
    const firstOfSecondPlan = PLAN_CHUNK / COMMIT_CHUNK + 1;
    let calls = 0;
    const firstPlanJobs = new Set<string>();
    t.ledger.commitFires = async (fires, leader, missed) => {
      // The first commit of the tick's second plan fails: the first plan's jobs are handled already.
      if (++calls === firstOfSecondPlan) throw new Error('Connection terminated unexpectedly');
      if (calls < firstOfSecondPlan) for (const f of fires) firstPlanJobs.add(f.job);
      return commit(fires, leader, missed);
    };
    await t.clock.advance(500); // to the 1 s tick (the clock starts at 0.5 s)
    assert.equal(policyReads, 2, 'one policy read per plan up to the failure (a single plan reads once)');
    await t.clock.advance(COMMIT_RETRY_MS); // the retry
    // The failed commit threw before the ledger saw it; the chunk committing beside it is asked
    // again with the retried plan (as duplicates), the first plan's chunks never.
    const askedOfFirstPlan = t.ledger.commitLog.flatMap((c) => c.fires).filter((f) => firstPlanJobs.has(f.job)).length;
    assert.equal(
      askedOfFirstPlan,
      PLAN_CHUNK,
      'the first plan is not asked again (a tick planned whole would ask all of it again as duplicates)',
    );
    const asked = t.ledger.commitLog.reduce((n, c) => n + c.fires.length, 0);
    assert.ok(asked <= jobs + COMMIT_CHUNK, `at most the chunk beside the failed one is asked twice (${asked})`);
    assert.equal(
      new Set(t.ledger.commitLog.filter((c) => c.outcome === 'committed').flatMap((c) => c.fires.map((f) => f.job)))
        .size,
      jobs,
    );
    for (const i of [0, PLAN_CHUNK - 1, PLAN_CHUNK, jobs - 1])
      assert.deepEqual(
        t.ledger.of(`job${i}`).map((r) => iso(r.scheduledAt.getTime())),
        [iso(T0 + 1000)],
        `job${i}`,
      );
    const delivered = t.delivery.enqueued.map((r) => r.runId);
    assert.equal(new Set(delivered).size, jobs, 'every run delivered once');
    assert.equal(delivered.length, jobs);
  });

  it('an election catches up PLAN_CHUNK jobs a commit plan; a failed chunk ends the tenure and the next leader goes on from it, none twice', async () => {
    const jobs = PLAN_CHUNK * 2 + 500;
    const t = setup(Array.from({ length: jobs }, () => ({ misfire: 'all' as const, catchUpWindowMs: 5000 })));
    for (let i = 0; i < jobs; i++)
      t.ledger.runs.push({
        id: BigInt(1_000_000 + i),
        job: `job${i}`,
        scheduledAt: new Date(T0 - 3000),
        trigger: 'schedule',
        leaderToken: 1n,
        state: 'completed',
        enqueued: true,
      });
    const pausesRead = t.ledger.pauses.bind(t.ledger);
    let policyReads = 0;
    t.ledger.pauses = () => {
      policyReads++;
      return pausesRead();
    };
    const commit = t.ledger.commitFires.bind(t.ledger);
    let calls = 0;
    const firstOfSecondPlan = (PLAN_CHUNK * 3) / COMMIT_CHUNK + 1; // three catch-up slots a job
    t.ledger.commitFires = async (fires, leader, missed) => {
      if (++calls === firstOfSecondPlan) throw new Error('Connection terminated unexpectedly');
      return commit(fires, leader, missed);
    };
    await assert.rejects(t.lead(), /Connection terminated/);
    assert.equal(policyReads, 2, 'one policy read per plan up to the failure');
    const caughtUp = (i: number) => t.ledger.of(`job${i}`).filter((r) => r.trigger === 'catchup').length;
    assert.equal(caughtUp(0), 3, 'the first plan committed before the failure');
    assert.equal(caughtUp(PLAN_CHUNK), 0, 'the failed plan committed nothing');

    // The next tenure reads the first plan's catch-ups as last fires and goes on with the rest.
    policyReads = 0;
    await t.loop.lead(new AbortController().signal);
    assert.equal(policyReads, 2, 'the rest: two plans');
    for (const i of [0, PLAN_CHUNK - 1, PLAN_CHUNK, jobs - 1]) assert.equal(caughtUp(i), 3, `job${i}`);
    assert.equal(
      t.ledger.commitLog.filter((c) => c.outcome === 'committed').reduce((n, c) => n + c.fires.length, 0),
      jobs * 3,
      'every catch-up slot asked once',
    );
    t.loop.stop();
  });

  it('a tenure does not keep what it planned at election (its eras, catch-up) while it leads', async () => {
    const gc = runInNewContext('gc') as () => void; // --expose-gc, set below before the context was made
    const t = setup(Array.from({ length: 100 }, () => ({})));
    let eras: WeakRef<object> | undefined;
    const open = t.ledger.openNewEras.bind(t.ledger);
    t.ledger.openNewEras = (list, leader) => {
      eras ??= new WeakRef(list);
      return open(list, leader);
    };
    await t.lead();
    assert.ok(eras, 'the election opened eras for the new schedules');
    await new Promise((r) => setImmediate(r));
    gc();
    assert.equal(eras.deref(), undefined, 'the election-time list of eras was let go, the tenure still on');
    assert.equal(t.abort.signal.aborted, false);
    await t.clock.advance(1000);
    assert.equal(t.ledger.of('job0').length, 1, 'the tenure fires on');
    t.abort.abort();
  });

  it('overlap "queue": one run waits behind the active one and is delivered when it finishes', async () => {
    const t = setup([{ overlap: 'queue' }]);
    await t.lead();
    await t.clock.advance(3000);
    const runs = t.ledger.of('job0');
    assert.deepEqual(
      runs.map((r) => r.state),
      ['pending', 'pending', 'skipped'],
    );
    assert.deepEqual(
      t.delivery.enqueued.map((r) => r.runId),
      [runs[0]!.id],
      'the queued run is held back',
    );
    t.ledger.finish(runs[0]!.id);
    await t.loop.sweepOutbox();
    assert.deepEqual(
      t.delivery.enqueued.map((r) => r.runId),
      [runs[0]!.id, runs[1]!.id],
    );
  });

  it('overlap "replace": the active run is cancelled through delivery, the new one fires', async () => {
    const t = setup([{ overlap: 'replace' }]);
    const atCancel: string[][] = [];
    t.delivery.onCancel = () => atCancel.push(t.ledger.of('job0').map((r) => r.state));
    await t.lead();
    await t.clock.advance(2000);
    const runs = t.ledger.of('job0');
    assert.deepEqual(
      runs.map((r) => r.state),
      ['cancelled', 'pending'],
    );
    assert.deepEqual(t.delivery.cancelled, [runs[0]!.id]);
    assert.deepEqual(
      atCancel,
      [['cancelled', 'pending']],
      'workers are told only once the replacing fire is committed',
    );
  });

  it('overlap "replace" from a stale leader: the fence refuses the batch, nothing is cancelled, the loop steps down', async () => {
    const t = setup([{ overlap: 'replace' }]);
    await t.lead();
    await t.clock.advance(1000);
    const [first] = t.ledger.of('job0');
    assert.equal(first?.state, 'pending');
    t.ledger.fences.set('scheduler/l', 9n); // a newer leader has committed meanwhile
    await t.clock.advance(1000);
    assert.deepEqual(
      t.ledger.of('job0').map((r) => r.state),
      ['pending'],
      "the newer leader's run is untouched",
    );
    assert.deepEqual(t.delivery.cancelled, []);
    assert.equal(t.stepDowns.length, 1);
    assert.match(t.stepDowns[0]!, /fence refused token 5/);
    assert.equal(t.logs.filter((l) => /fire commit failed/.test(l.msg)).length, 0, 'a refusal is not a blip to retry');
  });

  it('overlap "replace" during a failed commit: nothing is cancelled until the replacing fire commits', async () => {
    const t = setup([{ overlap: 'replace' }]);
    await t.lead();
    await t.clock.advance(1000);
    t.ledger.failCommits = Infinity; // the ledger is down from the 2 s tick until 3.1 s
    await t.clock.advance(1600);
    assert.deepEqual(
      t.ledger.of('job0').map((r) => r.state),
      ['pending'],
    );
    assert.deepEqual(t.delivery.cancelled, []);
    t.ledger.failCommits = 0;
    await t.clock.advance(COMMIT_RETRY_MS); // the retry commits 2 s and 3 s; the first run is replaced
    const runs = t.ledger.of('job0');
    assert.deepEqual(
      runs.map((r) => iso(r.scheduledAt.getTime())),
      [1000, 2000, 3000].map((d) => iso(T0 + d)),
    );
    assert.deepEqual(
      runs.map((r) => r.state),
      ['cancelled', 'pending', 'pending'],
    );
    assert.deepEqual(t.delivery.cancelled, [runs[0]!.id]);
  });

  it('a failed commit loses nothing: the instants due during a ledger outage are committed afterwards, once each (misfire "all")', async () => {
    const t = setup([{ misfire: 'all' }]);
    await t.lead();
    await t.clock.advance(1000); // T0+1s commits
    t.ledger.failCommits = Infinity; // down from the 2 s tick until 3.1 s: every retry meanwhile fails
    await t.clock.advance(1600);
    assert.deepEqual(
      t.ledger.of('job0').map((r) => iso(r.scheduledAt.getTime())),
      [iso(T0 + 1000)],
    );
    t.ledger.failCommits = 0;
    await t.clock.advance(2900); // the first retry after 3.1 s commits 2 s and 3 s; then 4, 5, 6 s on time
    const times = t.ledger.of('job0').map((r) => r.scheduledAt.getTime());
    assert.deepEqual(
      times.map(iso),
      [1, 2, 3, 4, 5, 6].map((s) => iso(T0 + s * 1000)),
    );
    assert.deepEqual(t.missed, [], 'nothing missed');
    const log = t.ledger.commitLog.map((c) => [c.outcome, c.fires.map((f) => (f.scheduledAt.getTime() - T0) / 1000)]);
    const failed = log.filter(([outcome]) => outcome === 'failed');
    assert.ok(failed.length >= 2, 'the 2 s tick and the 3 s tick at least');
    assert.deepEqual(
      failed.map(([, s]) => s),
      failed.map(([, s]) => ((s as number[]).includes(3) ? [2, 3] : [2])),
      'each failed attempt is replanned from the last committed instant',
    );
    assert.deepEqual(
      log.filter(([outcome]) => outcome !== 'failed'),
      [
        ['committed', [1]],
        ['committed', [2, 3]],
        ['committed', [4]],
        ['committed', [5]],
        ['committed', [6]],
      ],
      'no instant is committed twice',
    );
    assert.deepEqual((await t.ledger.lastFired()).get('job0')?.toISOString(), iso(T0 + 6000));
    assert.equal(t.delivery.enqueued.length, 6);
    const failures = t.logs.filter((l) => /fire commit failed/.test(l.msg));
    assert.equal(failures.length, failed.length, 'every failure is logged');
    for (const f of failures) assert.equal(f.err?.message, 'connection reset by peer');
    assert.equal(t.stepDowns.length, 0, 'a database outage is not a reason to step down');
    t.abort.abort();
  });

  it('a failed commit is retried every COMMIT_RETRY_MS: a ledger back within a second commits the slot before the next one is due', async () => {
    // The ledger failover's gap on the leader's side: the promoted standby is found by the first
    // retry after the promotion, not by the next slot's tick.
    const t = setup([{}]);
    const attempts: number[] = [];
    const committedAt: number[] = [];
    const commit = t.ledger.commitFires.bind(t.ledger);
    t.ledger.commitFires = async (fires, leader) => {
      attempts.push(t.clock.now());
      const result = await commit(fires, leader);
      committedAt.push(t.clock.now());
      return result;
    };
    await t.lead();
    await t.clock.advance(1000); // T0+1s commits
    t.ledger.failCommits = Infinity; // down from the 2 s tick...
    await t.clock.advance(600);
    const backAt = t.clock.now(); // ...until T0+2.1 s
    t.ledger.failCommits = 0;
    await t.clock.advance(900 - 1); // to just before the 3 s slot
    assert.deepEqual(
      t.ledger.of('job0').map((r) => iso(r.scheduledAt.getTime())),
      [iso(T0 + 1000), iso(T0 + 2000)],
      'the 2 s slot committed before the 3 s slot was due',
    );
    assert.ok(
      committedAt[1]! - backAt <= COMMIT_RETRY_MS,
      `committed ${committedAt[1]! - backAt} ms after the ledger was back`,
    );
    const retries = attempts.slice(1, attempts.indexOf(committedAt[1]!) + 1);
    for (let i = 1; i < retries.length; i++)
      assert.ok(
        retries[i]! - retries[i - 1]! <= COMMIT_RETRY_MS,
        `attempts at ${retries.map((a) => a - T0).join(', ')}`,
      );
    t.abort.abort();
  });

  it('a failed commit under misfire "skip": instants beyond the grace are reported missed once, the rest fire', async () => {
    const t = setup([{ misfire: 'skip' }]);
    await t.lead();
    await t.clock.advance(1000);
    t.ledger.failCommits = Infinity; // down from the 2 s tick until 3.1 s: by then 2 s is past the 1 s grace
    await t.clock.advance(1600);
    t.ledger.failCommits = 0;
    await t.clock.advance(3400);
    assert.deepEqual(
      t.ledger.of('job0').map((r) => iso(r.scheduledAt.getTime())),
      [1, 3, 4, 5, 6].map((s) => iso(T0 + s * 1000)),
    );
    assert.deepEqual(
      t.missed.map((m) => m.times.map((d) => iso(d.getTime()))),
      [[iso(T0 + 2000)]],
      'reported once, when the batch that gave it up committed',
    );
    t.abort.abort();
  });

  it('a commit whose reply was lost is retried: the unique key keeps each instant once and the outbox delivers it', async () => {
    const t = setup([{}]);
    const dupes: number[] = [];
    t.loop.on('fire:duplicate', (n) => dupes.push(n));
    await t.lead();
    await t.clock.advance(1000);
    t.ledger.failAfterCommits = 1;
    await t.clock.advance(4000);
    const runs = t.ledger.of('job0');
    assert.deepEqual(
      runs.map((r) => iso(r.scheduledAt.getTime())),
      [1, 2, 3, 4, 5].map((s) => iso(T0 + s * 1000)),
    );
    assert.deepEqual(dupes, [1], 'the retried instant was refused by the unique key');
    assert.deepEqual(
      t.delivery.enqueued.map((r) => r.runId).sort((a, b) => Number(a - b)),
      runs.map((r) => r.id),
      'every run delivered once (the lost one by the outbox)',
    );
    t.abort.abort();
  });

  it('every skipped fire is logged with job, scheduledAt and reason, once, even across a failed commit', async () => {
    const t = setup([{}, { overlap: 'skip' }]);
    t.ledger.paused.add('job0');
    t.ledger.failCommits = 1; // the first tick fails; its retry commits both instants
    await t.lead();
    await t.clock.advance(2000);
    const lines = t.logs
      .filter((l) => /fire skipped/.test(l.msg))
      .map((l) => ({ level: l.level, job: l.job, scheduledAt: l.scheduledAt, reason: l.reason }));
    assert.deepEqual(
      lines.sort((a, b) => `${a.job}${a.scheduledAt}`.localeCompare(`${b.job}${b.scheduledAt}`)),
      [
        { level: 30, job: 'job0', scheduledAt: iso(T0 + 1000), reason: 'job is paused' },
        { level: 30, job: 'job0', scheduledAt: iso(T0 + 2000), reason: 'job is paused' },
        { level: 40, job: 'job1', scheduledAt: iso(T0 + 2000), reason: 'overlap "skip": previous run still active' },
      ],
    );
    assert.equal(t.skipped.length, 3, 'one fire:skipped event per skipped instant');
    t.abort.abort();
  });

  it('a paused job records skipped fires and delivers nothing; a manual trigger still runs', async () => {
    const t = setup([{}]);
    t.ledger.paused.add('job0');
    await t.lead();
    await t.clock.advance(2000);
    assert.deepEqual(
      t.ledger.of('job0').map((r) => r.state),
      ['skipped', 'skipped'],
    );
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
    const after = t.ledger
      .of('job0')
      .map((r) => r.scheduledAt.getTime())
      .sort((a, b) => a - b);
    for (let i = 1; i < after.length; i++)
      assert.equal(after[i]! - after[i - 1]!, 1000, `gap before ${iso(after[i]!)}`);
  });

  it("a late tick under misfire 'skip' records its missed instants as one range, in the commit, with the tenure", async () => {
    const t = setup([{ misfire: 'skip' }], { token: 9n });
    await t.lead();
    await t.clock.advance(2000); // fires T0+1 and T0+2
    t.clock.jumpWall(10_000); // a stalled loop: the next tick (for T0+3) runs at T0+13
    await t.clock.advance(1000);
    assert.deepEqual(
      t.ledger.missed.map((m) => [m.job, iso(m.firstAt.getTime()), iso(m.lastAt.getTime()), m.count, m.reason]),
      [['job0', iso(T0 + 3000), iso(T0 + 11_000), 9, 'misfire-policy']],
    );
    assert.equal(t.ledger.missed[0]!.outageStart?.getTime(), T0 + 2000, 'the last instant handled: the tick before');
    assert.equal(t.ledger.missed[0]!.outageEnd.getTime(), T0 + 13_000, 'decided by the late tick');
    // Every instant up to now is fired or in the range (12 and 13 are within the 1 s grace).
    const fired = t.ledger.of('job0').map((r) => r.scheduledAt.getTime());
    assert.deepEqual(fired, [T0 + 1000, T0 + 2000, T0 + 12_000, T0 + 13_000]);
    // The tenure's era, opened once at its start.
    assert.deepEqual(
      t.ledger.eras.map((e) => [e.job, e.expression, e.from.getTime()]),
      [['job0', '* * * * * *', T0 + 500]],
    );
  });
});
