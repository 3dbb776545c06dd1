import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { pino } from 'pino';
import { ManualClock } from '../support/manual-clock.js';
import { defineJob, type JobOptions } from '../../src/jobs/define-job.js';
import { JobRegistry } from '../../src/jobs/job-registry.js';
import type { DeliverableRun } from '../../src/scheduler/firing/run-delivery.js';
import type { Lease } from '../../src/locks/lease.js';
import { FireLoop } from '../../src/scheduler/firing/fire-loop.js';
import { StandIn } from '../../src/scheduler/stand-in/stand-in.js';
import { rendezvousOwners } from '../../src/scheduler/stand-in/rendezvous.js';
import { FLOOR_MS, MISSING_MS, StandInGrace } from '../../src/scheduler/stand-in/stand-in-grace.js';
import type { ScheduledJobs } from '../../src/cron/scheduled-job.js';
import { MemoryLedger } from '../support/memory-ledger.js';

const T0 = Date.UTC(2026, 0, 1, 0, 0, 0);
const FENCE = 'scheduler/l';

/**
 * One ledger, a leader's fire loop and a follower's stand-in on one driven clock. `leaderAlive`
 * false is a leader that crashed holding its lease: its fire loop stops, nobody else leads yet.
 */
function setup(
  jobs: Partial<JobOptions>[],
  o: {
    graceMs?: number;
    fenceRaised?: boolean;
    wrap?: (r: ScheduledJobs) => ScheduledJobs;
    perJob?: number;
    followers?: string[];
    /** Commits stamped on the driven clock, so the stand-in learns the leader's lateness. */
    learns?: boolean;
  } = {},
) {
  const clock = new ManualClock(T0 + 100);
  const ledger = new MemoryLedger();
  if (o.learns) ledger.now = () => clock.now();
  if (o.fenceRaised !== false) ledger.fences.set(FENCE, 7n);
  const delivered: DeliverableRun[] = [];
  const delivery = { enqueue: async (runs: DeliverableRun[]) => void delivered.push(...runs), cancel: async () => {} };
  const defined = new JobRegistry(
    jobs.map((j, i) => defineJob({ name: `job${i}`, schedule: '* * * * * *', handler: () => {}, ...j })),
  );
  const registry = o.wrap ? o.wrap(defined) : defined;
  const logger = pino({ level: 'silent' });
  const lease: Lease = { name: 'l', holder: 'a', token: 7n, ttlMs: 10_000, safetyMarginMs: 1000, deadline: Infinity };
  const leader = new FireLoop({
    registry,
    ledger,
    delivery,
    leadership: { lease: () => lease, stepDown: () => {} },
    clock,
    logger,
    replicaId: 'a',
    fenceResource: FENCE,
  });
  let followerLeads = false;
  const standIn = new StandIn({
    registry,
    ledger,
    delivery,
    policies: leader,
    isLeading: () => followerLeads,
    clock,
    logger,
    replicaId: 'b',
    fenceResource: FENCE,
    graceMs: o.graceMs ?? 500,
    leaseTtlMs: 10_000,
    perJob: o.perJob,
    followers: () => o.followers,
  });
  const abort = new AbortController();
  return {
    clock,
    ledger,
    delivered,
    standIn,
    lead: () => leader.lead(abort.signal),
    crashLeader: () => abort.abort(),
    promoteFollower: () => (followerLeads = true),
  };
}

const slots = (ledger: MemoryLedger, job = 'job0') =>
  ledger.of(job).map((r) => ({ at: (r.scheduledAt.getTime() - T0) / 1000, trigger: r.trigger }));

describe('StandIn (driven clock)', () => {
  it('commits nothing while the leader commits on time', async () => {
    const t = setup([{}, { schedule: '*/2 * * * * *' }]);
    await t.lead();
    await t.standIn.start();
    await t.clock.advance(10_000);
    assert.equal(t.ledger.runs.filter((r) => r.trigger === 'standin').length, 0);
    assert.equal(t.ledger.of('job0').length, 10);
  });

  it('after a leader crash, commits each overdue slot once, grace after it is due, and delivers it', async () => {
    const t = setup([{}]);
    await t.lead();
    await t.standIn.start();
    await t.clock.advance(2_000); // the leader fires 1 s and 2 s
    t.crashLeader();
    await t.clock.advance(4_950); // no leader for 5 s: 7.05 s
    assert.deepEqual(slots(t.ledger), [
      { at: 1, trigger: 'schedule' },
      { at: 2, trigger: 'schedule' },
      ...[3, 4, 5, 6, 7].map((at) => ({ at, trigger: 'standin' })),
    ]);
    // 3 s at 3.5 s (the grace); the leader is then missing: 4 to 7 s each MISSING_MS after the slot.
    await t.clock.advance(1_000);
    assert.equal(slots(t.ledger).length, 8, 'and 8 s');
    const standIns = t.ledger.runs.filter((r) => r.trigger === 'standin');
    assert.ok(
      standIns.every((r) => r.leaderToken === 7n),
      'stand-in fires carry the fence token',
    );
    assert.deepEqual(
      t.delivered.filter((d) => standIns.some((r) => r.id === d.runId)).length,
      standIns.length,
      'every stand-in fire is handed to the queue',
    );
  });

  it('a slot the leader committed late (but within the grace) is not raced', async () => {
    const t = setup([{}], { graceMs: 500 });
    await t.standIn.start();
    // No leader loop: commit by hand 300 ms late, as a slow leader would.
    await t.clock.advance(1_200);
    await t.ledger.commitFires([{ job: 'job0', scheduledAt: new Date(T0 + 1000), trigger: 'schedule' }], {
      fenceResource: FENCE,
      token: 7n,
      replicaId: 'a',
      stillLeading: () => true,
    });
    await t.clock.advance(400); // past 1 s + grace
    assert.deepEqual(slots(t.ledger), [{ at: 1, trigger: 'schedule' }]);
  });

  it("learns the leader's lateness: after a crash it stands in that soon after the slot, not the whole grace", async () => {
    const t = setup([{}], { learns: true, graceMs: 500 });
    await t.lead();
    await t.standIn.start();
    assert.equal(t.standIn.graceMs, 500, 'nothing seen yet: the configured grace');
    await t.clock.advance(3_000); // the leader fires 1, 2 and 3 s on time; the stand-in checks each
    assert.equal(t.standIn.graceMs, FLOOR_MS, 'a leader committing on time: the floor');
    t.crashLeader();
    await t.clock.advance(3_000);
    const standIns = t.ledger.runs.filter((r) => r.trigger === 'standin');
    assert.deepEqual(
      standIns.map((r) => [(r.scheduledAt.getTime() - T0) / 1000, Math.round(r.createdAt! - r.scheduledAt.getTime())]),
      // The first slot the leader missed waits the learned grace; then the leader is missing.
      [
        [4, FLOOR_MS],
        [5, MISSING_MS],
        [6, MISSING_MS],
      ],
    );
  });

  it('while the leader is missing, checks each slot soon after it is due, until a leader commits again', async () => {
    const t = setup([{}], { learns: true, graceMs: 500 });
    await t.lead();
    await t.standIn.start();
    await t.clock.advance(3_000); // the leader fires 1, 2 and 3 s
    t.crashLeader();
    await t.clock.advance(3_900); // 7.0 s: stood in for 4, 5 and 6 s
    assert.equal(t.standIn.graceMs, MISSING_MS);
    // A new leader commits 7 s on time: the stand-in's check at 7.01 s sees it.
    await t.ledger.commitFires([{ job: 'job0', scheduledAt: new Date(T0 + 7_000), trigger: 'schedule' }], {
      fenceResource: FENCE,
      token: 8n,
      replicaId: 'c',
      stillLeading: () => true,
    });
    await t.clock.advance(100);
    assert.equal(t.standIn.graceMs, FLOOR_MS, 'the leader seen again: the learned grace');
    assert.deepEqual(slots(t.ledger).slice(3), [
      ...[4, 5, 6].map((at) => ({ at, trigger: 'standin' })),
      { at: 7, trigger: 'schedule' },
    ]);
  });

  it('counts the leader missing for one lease TTL from the check that found it, not renewed by the quick checks', async () => {
    const t = setup([{}], { learns: true, graceMs: 500 });
    await t.lead();
    await t.standIn.start();
    await t.clock.advance(3_000);
    t.crashLeader(); // and no new leader: every slot is stood in for
    await t.clock.advance(13_900); // 17.0 s
    const late = t.ledger.runs
      .filter((r) => r.trigger === 'standin')
      .map((r) => [(r.scheduledAt.getTime() - T0) / 1000, Math.round(r.createdAt! - r.scheduledAt.getTime())]);
    // Found missing at 4.05 s, for the 10 s TTL: 5 to 14 s quickly; 15 s waits the grace again.
    assert.deepEqual(late, [
      [4, FLOOR_MS],
      ...[5, 6, 7, 8, 9, 10, 11, 12, 13, 14].map((at) => [at, MISSING_MS]),
      [15, FLOOR_MS],
      [16, MISSING_MS],
    ]);
  });

  it('does not race a leader that is alive but behind: waits the whole grace, and learns the lateness', async () => {
    const t = setup([{}, {}], { learns: true, graceMs: 500 });
    const commit = (job: string, s: number) =>
      t.ledger.commitFires([{ job, scheduledAt: new Date(T0 + s * 1000), trigger: 'schedule' }], {
        fenceResource: FENCE,
        token: 7n,
        replicaId: 'a',
        stillLeading: () => true,
      });
    await t.standIn.start();
    await t.clock.advance(900); // 1 s
    await commit('job0', 1);
    await commit('job1', 1);
    await t.clock.advance(1_000); // 2 s: the leader commits job0 on time, job1 not yet
    await commit('job0', 2);
    assert.equal(t.standIn.graceMs, FLOOR_MS);
    await t.clock.advance(300); // 2.3 s: job1's slot is late, and was not raced at 2.05 s
    assert.equal(t.ledger.of('job1').length, 1);
    await commit('job1', 2);
    await t.clock.advance(1_000); // 3.3 s, past the second look at 2.5 s
    assert.deepEqual(slots(t.ledger, 'job1'), [
      { at: 1, trigger: 'schedule' },
      { at: 2, trigger: 'schedule' },
    ]);
    assert.equal(t.standIn.graceMs, 500, 'a 300 ms late commit raised the grace (2 x 300 + 20, at most 500)');
    // The leader is gone from 3 s on: its slots are stood in for at the raised grace.
    await t.clock.advance(300); // 3.6 s
    assert.deepEqual(
      t.ledger.runs.filter((r) => r.trigger === 'standin').map((r) => [r.job, r.createdAt! - T0]),
      [
        ['job0', 3500],
        ['job1', 3500],
      ],
    );
  });

  it('gives a burst of slots due together more grace, so a leader still committing its first chunk is not raced', async () => {
    const jobs = Array.from({ length: 1000 }, () => ({}));
    const t = setup(jobs, { learns: true, graceMs: 500 });
    const commit = (from: number, to: number, s: number) =>
      t.ledger.commitFires(
        jobs.slice(from, to).map((_, i) => ({
          job: `job${from + i}`,
          scheduledAt: new Date(T0 + s * 1000),
          trigger: 'schedule' as const,
        })),
        { fenceResource: FENCE, token: 7n, replicaId: 'a', stillLeading: () => true },
      );
    await t.standIn.start();
    await t.clock.advance(900); // 1 s and 2 s: all on time
    await commit(0, 1000, 1);
    await t.clock.advance(1_000);
    await commit(0, 1000, 2);
    await t.clock.advance(1_080); // 3.08 s
    assert.equal(t.standIn.graceMs, FLOOR_MS);
    await commit(0, 250, 3); // the leader's first chunk, 80 ms late: a lone slot would have been raced at 50 ms
    await t.clock.advance(120); // 3.2 s
    await commit(250, 1000, 3); // and the rest, 200 ms late
    await t.clock.advance(600);
    assert.equal(t.ledger.runs.filter((r) => r.trigger === 'standin').length, 0);
    assert.equal(t.ledger.runs.length, 3000);
  });

  it('rests while its own replica leads, and while no leader has ever raised the fence', async () => {
    const t = setup([{}]);
    t.promoteFollower();
    await t.standIn.start();
    await t.clock.advance(3_000);
    assert.equal(t.ledger.runs.length, 0);
    const u = setup([{}], { fenceRaised: false });
    await u.standIn.start();
    await u.clock.advance(3_000);
    assert.equal(u.ledger.runs.length, 0, 'nobody to stand in for');
  });

  it('keeps pause and overlap rules, and leaves overlap "replace" jobs to the leader', async () => {
    const t = setup([{ overlap: 'skip' }, {}, { overlap: 'replace' }]);
    await t.ledger.setPaused('job1', true);
    await t.standIn.start();
    await t.clock.advance(3_000);
    assert.deepEqual(
      t.ledger.of('job0').map((r) => r.state),
      ['pending', 'skipped', 'skipped'],
      'overlap skip: the first run is still active, so the later slots are skipped, as the leader would',
    );
    assert.ok(
      t.ledger.of('job1').every((r) => r.state === 'skipped'),
      'paused: recorded skipped',
    );
    assert.equal(t.ledger.of('job2').length, 0, "'replace' needs the leader's fence");
  });

  it("never fires a slot older than the job's misfire grace: that is the next leader's catch-up", async () => {
    const t = setup([{ misfireGraceMs: 200 }], { graceMs: 500 });
    await t.standIn.start();
    await t.clock.advance(5_000);
    assert.equal(t.ledger.runs.length, 0);
  });

  it('stops firing when stopped, and 0 grace turns it off', async () => {
    const t = setup([{}], { graceMs: 0 });
    await t.standIn.start();
    await t.clock.advance(3_000);
    assert.equal(t.ledger.runs.length, 0);
    const u = setup([{}]);
    await u.standIn.start();
    await u.clock.advance(2_000);
    u.standIn.stop();
    const n = u.ledger.runs.length;
    await u.clock.advance(3_000);
    assert.equal(u.ledger.runs.length, n);
    assert.ok(n > 0);
  });

  it("after a schedule changes (a runtime schedule's new version), stands in for the new slots only, each checked once", async () => {
    // job0 runs every second until it is switched to its every-two-seconds twin.
    const replacement = defineJob({ name: 'job0', schedule: '*/2 * * * * *', handler: () => {} });
    let switched = false;
    const checked: string[][] = [];
    const t = setup([{}], {
      wrap: (r) => ({
        get: (name) => (switched && name === 'job0' ? replacement : r.get(name)),
        require: (name) => r.require(name),
        list: () => r.list(),
      }),
    });
    const lastCommitsOf = t.ledger.lastCommitsOf.bind(t.ledger);
    t.ledger.lastCommitsOf = (jobs) => (checked.push([...jobs]), lastCommitsOf(jobs));
    await t.standIn.start();
    // Stands in for 1 s at 1.5 s; the leader is then missing: the 2 s slot (of both schedules) is
    // checked at 2.01 s.
    await t.clock.advance(1_850);
    switched = true;
    for (let i = 0; i < 3; i++) await t.standIn.reschedule(['job0'], () => t.clock.now());
    await t.clock.advance(6_000);
    assert.deepEqual(
      slots(t.ledger).map((s) => s.at),
      [1, 2, 4, 6],
      'the slot it was waiting for still counts; the old every-second slots (3, 5, 7) do not',
    );
    assert.ok(
      checked.every((jobs) => jobs.length === 1),
      `each check reads the job once: ${JSON.stringify(checked)}`,
    );
    assert.equal(checked.length, 4, 'one check per slot, never a doubled chain of checks');
  });

  it('with stand-ins per job k, stands in only for the jobs whose k owners among the live followers include it', async () => {
    const jobs = Array.from({ length: 12 }, () => ({}));
    const followers = ['b', 'c', 'd', 'e'];
    const t = setup(jobs, { perJob: 2, followers });
    await t.standIn.start();
    await t.clock.advance(1_600); // the 1 s slot, past the grace
    const mine = jobs.map((_, i) => `job${i}`).filter((j) => rendezvousOwners(j, followers, 2).includes('b'));
    assert.ok(mine.length > 0 && mine.length < jobs.length, `b owns ${mine.length} of ${jobs.length}`);
    assert.deepEqual([...new Set(t.ledger.runs.map((r) => r.job))].sort(), mine.sort());
    const all = setup(jobs, { perJob: 0, followers });
    await all.standIn.start();
    await all.clock.advance(1_600);
    assert.equal(new Set(all.ledger.runs.map((r) => r.job)).size, jobs.length, '0: every follower stands in for all');
    const alone = setup(jobs, { perJob: 2, followers: ['c'] });
    await alone.standIn.start();
    await alone.clock.advance(1_600);
    assert.equal(
      new Set(alone.ledger.runs.map((r) => r.job)).size,
      jobs.length,
      'with itself, two followers: both own all',
    );
  });

  it('never leaves a hole: after a slot it checked too late to stand in for, it commits no later slot of that job', async () => {
    const t = setup([{ misfireGraceMs: 1000 }]);
    await t.standIn.start();
    await t.clock.advance(1_600); // stands in for 1 s
    // This follower stalls 1.5 s (wall time runs on): its check of the 2 s slot comes at 4 s, past
    // the misfire grace, so 2 s (and 3 s, never checked) are the next leader's catch-up, which
    // starts after the job's last committed slot. Committing 4 s would move that past them.
    t.clock.jumpWall(1_500);
    await t.clock.advance(3_000);
    assert.deepEqual(slots(t.ledger), [{ at: 1, trigger: 'standin' }]);
  });
});

describe('StandInGrace', () => {
  it('is the configured grace until it has seen the leader, then twice the worst lateness of the last minute plus 20 ms, between the floor and the configured grace', async () => {
    const clock = new ManualClock(T0);
    const g = new StandInGrace(500, clock);
    assert.equal(g.current(), 500);
    g.observe(5);
    assert.equal(g.current(), FLOOR_MS);
    g.observe(100);
    assert.equal(g.current(), 220);
    g.observe(-30); // a ledger clock behind the replica's counts as on time
    assert.equal(g.current(), 220);
    g.observe(400);
    assert.equal(g.current(), 500);
    await clock.advance(61_000);
    assert.equal(g.current(), 500, 'all forgotten: the configured grace again');
    g.observe(60);
    assert.equal(g.current(), 140);
    assert.equal(new StandInGrace(30, clock).current(), 30);
    const low = new StandInGrace(30, clock);
    low.observe(0);
    assert.equal(low.current(), 30, 'never above the configured grace, even below the floor');
    // The leader missing: MISSING_MS for the hold, unless it is seen before.
    g.leaderMissed(1_000);
    assert.equal(g.current(), MISSING_MS);
    await clock.advance(999);
    assert.equal(g.current(), MISSING_MS);
    await clock.advance(1);
    assert.equal(g.current(), 140, 'the hold is over: the learned grace');
    g.leaderMissed(1_000);
    g.leaderSeen();
    assert.equal(g.current(), 140, 'seen again: the learned grace');
    const off = new StandInGrace(5, clock);
    off.leaderMissed(1_000);
    assert.equal(off.current(), 5, 'never above the configured grace');
  });
});
