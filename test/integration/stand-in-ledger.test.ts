import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import pg from 'pg';
import { slotOwner } from '../../src/cron/job-names.js';
import { seededRandom } from '../../src/drill/faults.js';
import { Ledger } from '../../src/ledger/ledger.js';
import type { FireRequest } from '../../src/ledger/fire-ledger.js';
import { createTestDatabase, type TestDatabase } from '../support/postgres-database.js';

/** The stand-in's commit on real PostgreSQL: one row per slot however many race, tokens in commit order. */
describe('Stand-in commits (real PostgreSQL)', () => {
  let db: TestDatabase;
  let ledger: Ledger;
  const FENCE = 'scheduler/s';
  const standIn = (id: string) => ({ fenceResource: FENCE, replicaId: id });
  const leader = (token: bigint) => ({ fenceResource: FENCE, token, replicaId: 'leader', stillLeading: () => true });
  const at = (s: number) => new Date(Date.UTC(2026, 2, 1, 0, 0, s));
  const fire = (job: string, s: number) => ({ job, scheduledAt: at(s), trigger: 'standin' as const });

  before(async () => {
    db = await createTestDatabase();
    ledger = new Ledger(db.pool);
  });
  after(async () => {
    await db.drop();
  });

  it('commits nothing before any leader raised the fence', async () => {
    const r = await ledger.fires.commitStandInFires([fire('a', 1)], standIn('f1'));
    assert.equal(r.committed.length, 0);
    const n = await db.pool.query("SELECT count(*)::int AS n FROM cw_runs WHERE job = 'a'");
    assert.equal(n.rows[0].n, 0);
  });

  it("carries the fence's token, moves the job state, and the leader's later fire of the slot is a duplicate", async () => {
    await ledger.fires.advanceFence(FENCE, 9n);
    const r = await ledger.fires.commitStandInFires([fire('b', 2)], standIn('f1'));
    assert.equal(r.committed.length, 1);
    const row = await db.pool.query("SELECT leader_token::text AS t, leader_id, trigger FROM cw_runs WHERE job = 'b'");
    assert.deepEqual(row.rows, [{ t: '9', leader_id: 'f1', trigger: 'standin' }]);
    assert.equal((await ledger.fires.lastFiredOf(['b', 'nope'])).get('b')?.toISOString(), at(2).toISOString());
    const late = await ledger.fires.commitFires([{ job: 'b', scheduledAt: at(2), trigger: 'schedule' }], leader(9n));
    assert.equal(late.duplicates, 1);
  });

  it('releases its pending runs with hand-over rows, as the leader does: the outbox has them until the hand-over is confirmed', async () => {
    await ledger.fires.advanceFence(FENCE, 9n);
    const r = await ledger.fires.commitStandInFires([fire('ho', 50), fire('ho', 51)], standIn('f1'));
    const ids = r.committed.map((f) => f.runId);
    assert.equal(ids.length, 2);
    const rows = async () =>
      (
        await db.pool.query<{ run_id: string }>(
          'SELECT run_id FROM cw_hand_overs WHERE run_id = ANY($1::bigint[]) ORDER BY run_id',
          [ids.map(String)],
        )
      ).rows.map((x) => BigInt(x.run_id));
    assert.deepEqual(await rows(), ids, 'a hand-over row per run');
    const released = await db.pool.query(
      'SELECT count(*)::int AS n FROM cw_runs WHERE id = ANY($1::bigint[]) AND enqueued_at IS NOT NULL',
      [ids.map(String)],
    );
    assert.equal(released.rows[0].n, 2, 'released to the queue in the commit, not by a second update');
    const outbox = async () =>
      (await ledger.fires.unenqueued(100, [])).filter((x) => x.job === 'ho').map((x) => x.runId);
    assert.deepEqual(await outbox(), ids, 'unconfirmed: the outbox would hand them over again');
    await ledger.fires.markEnqueued(ids);
    assert.deepEqual(await rows(), [], 'confirming deletes the rows');
    assert.deepEqual(await outbox(), []);
  });

  it("lastCommitsOf names who committed each job's last slot and when: what a stand-in learns the leader's lateness from", async () => {
    await ledger.fires.advanceFence(FENCE, 9n);
    const before = Date.now();
    await ledger.fires.commitFires(
      [
        { job: 'lc1', scheduledAt: at(40), trigger: 'schedule' },
        { job: 'lc1', scheduledAt: at(41), trigger: 'schedule' },
        { job: 'lc2', scheduledAt: at(40), trigger: 'schedule' },
        { job: 'lc2', scheduledAt: at(45), trigger: 'manual' },
      ],
      leader(9n),
    );
    await ledger.fires.commitStandInFires([fire('lc3', 42)], standIn('f1'));
    const last = await ledger.fires.lastCommitsOf(['lc1', 'lc2', 'lc3', 'nope']);
    assert.deepEqual([...last].map(([job, l]) => [job, l.slot.toISOString(), l.trigger]).sort(), [
      ['lc1', at(41).toISOString(), 'schedule'],
      ['lc2', at(40).toISOString(), 'schedule'], // a manual trigger is not a slot
      ['lc3', at(42).toISOString(), 'standin'],
    ]);
    const committedAt = last.get('lc1')!.committedAt!.getTime();
    assert.ok(committedAt >= before - 1000 && committedAt <= Date.now() + 1000, 'the commit time is the insert time');
    await db.pool.query("DELETE FROM cw_runs WHERE job = 'lc1'"); // retention took the run
    const gone = (await ledger.fires.lastCommitsOf(['lc1'])).get('lc1');
    assert.deepEqual(gone, { slot: at(41), trigger: null, committedAt: null });
  });

  it('many followers and the leader racing for the same slots commit each slot once', async () => {
    await ledger.fires.advanceFence(FENCE, 10n);
    const slots = Array.from({ length: 20 }, (_, i) => fire('c', 100 + i));
    const results = await Promise.all([
      ...['f1', 'f2', 'f3', 'f4'].map((id) => ledger.fires.commitStandInFires(slots, standIn(id))),
      ledger.fires.commitFires(
        slots.map((s) => ({ ...s, trigger: 'schedule' as const })),
        leader(10n),
      ),
    ]);
    assert.equal(
      results.reduce((n, r) => n + r.committed.length, 0),
      20,
      'the inserts that won add up to the slots',
    );
    const rows = await db.pool.query(
      "SELECT count(*)::int AS n, count(DISTINCT scheduled_at)::int AS d FROM cw_runs WHERE job = 'c'",
    );
    assert.deepEqual(rows.rows[0], { n: 20, d: 20 });
  });

  it('a new leader raising the fence while stand-ins commit: tokens never decrease in commit (id) order', async () => {
    await ledger.fires.advanceFence(FENCE, 11n);
    const work: Promise<unknown>[] = [];
    for (let i = 0; i < 30; i++) {
      work.push(ledger.fires.commitStandInFires([fire('d', 200 + i)], standIn(`f${i % 3}`)));
      if (i === 15)
        work.push(ledger.fires.commitFires([{ job: 'e', scheduledAt: at(1), trigger: 'schedule' }], leader(12n)));
    }
    await Promise.all(work);
    const rows = await db.pool.query<{ t: string }>(
      "SELECT leader_token::text AS t FROM cw_runs WHERE job IN ('d', 'e') ORDER BY id",
    );
    const tokens = rows.rows.map((r) => BigInt(r.t));
    for (let i = 1; i < tokens.length; i++)
      assert.ok(tokens[i]! >= tokens[i - 1]!, `token went back: ${tokens.join(',')}`);
    assert.ok(tokens.includes(12n));
  });

  it("commits a runtime schedule's slot only with the version in effect at its instant, with that version's payload", async () => {
    await ledger.fires.advanceFence(FENCE, 13n);
    const spec = {
      handler: 'report',
      cron: '* * * * * *',
      timezone: 'UTC',
      misfire: 'all' as const,
      overlap: 'allow' as const,
      catchUpWindowMs: 300_000,
      misfireGraceMs: 1000,
      payload: { v: 1 },
      paused: false,
    };
    await ledger.schedules.create('s1', spec, 'test');
    const v2 = await ledger.schedules.change('s1', 'update', (s) => ({ ...s, payload: { v: 2 } }), 'test');
    // Slots after version 2 took effect: version 1's plan is outdated there, version 2's is current.
    const slot = (n: number) => new Date(Math.ceil(v2.updatedAt.getTime() / 1000) * 1000 + n * 1000);
    const runtimeFire = (n: number, version: number, v: number) => ({
      job: 'report/s1',
      scheduledAt: slot(n),
      trigger: 'standin' as const,
      schedule: { id: 's1', version },
      payload: { v },
    });
    const old = await ledger.fires.commitStandInFires([runtimeFire(1, 1, 1)], standIn('f1'));
    assert.equal(old.committed.length, 0);
    assert.equal(old.outdated, 1);
    const cur = await ledger.fires.commitStandInFires([runtimeFire(1, 2, 2), runtimeFire(2, 1, 1)], standIn('f2'));
    assert.equal(cur.committed.length, 1);
    assert.equal(cur.outdated, 1);
    const rows = await db.pool.query(
      "SELECT schedule_version AS version, payload, trigger, leader_token::text AS t FROM cw_runs WHERE job = 'report/s1'",
    );
    assert.deepEqual(rows.rows, [{ version: 2, payload: { v: 2 }, trigger: 'standin', t: '13' }]);
  });

  it("a runtime schedule's slot fired under its old handler's name is taken for every path under the new one", async () => {
    // Issue 25 #1: "report/s2" ran slots 1-2, then the schedule's handler became "tick".
    await ledger.fires.advanceFence(FENCE, 14n);
    const first = await ledger.fires.commitFires(
      [1, 2].map((s) => ({ ...fire('report/s2', s), trigger: 'schedule' as const })),
      leader(14n),
    );
    assert.equal(first.committed.length, 2);
    const standing = await ledger.fires.commitStandInFires([fire('tick/s2', 2), fire('tick/s2', 3)], standIn('f1'));
    assert.deepEqual(
      standing.committed.map((r) => [r.job, r.scheduledAt.getTime()]),
      [['tick/s2', at(3).getTime()]],
    );
    const backfill = await ledger.fires.commitFires(
      [1, 2, 3].map((s) => ({ ...fire('tick/s2', s), trigger: 'backfill' as const })),
      leader(14n),
    );
    assert.equal(backfill.committed.length, 0);
    assert.equal(backfill.duplicates, 3);
    const rows = await db.pool.query(
      "SELECT schedule_id, count(*)::int AS n FROM cw_runs WHERE schedule_id = 's2' GROUP BY schedule_id",
    );
    assert.deepEqual(rows.rows, [{ schedule_id: 's2', n: 3 }]);
    // The stand-in's next slot follows the schedule's last fire, whichever name it had.
    assert.equal((await ledger.fires.lastFiredOf(['tick/s2'])).get('/s2')?.toISOString(), at(3).toISOString());
    assert.equal((await ledger.fires.lastFiredOf(['report/s2'])).get('/s2')?.toISOString(), at(3).toISOString());
  });

  it('refuses overlap "replace" fires: cancelling other runs needs the leader\'s fence', async () => {
    const r = await ledger.fires.commitStandInFires([{ ...fire('g', 1), replace: true }], standIn('f1'));
    assert.equal(r.committed.length, 0);
  });

  it('the leader and two stand-ins committing overlapping slots in any order never deadlock (no 40P01)', async () => {
    // Its own pool, which notices a deadlock after 20 ms instead of PostgreSQL's 1 s.
    const pool = new pg.Pool({ connectionString: db.url, max: 12, options: '-c deadlock_timeout=20ms' });
    const fast = new Ledger(pool, db.schema);
    await fast.fires.advanceFence(FENCE, 30n);
    const random = seededRandom(25);
    const shuffled = <T>(list: T[]): T[] => {
      const out = [...list];
      for (let i = out.length - 1; i > 0; i--) {
        const j = Math.floor(random() * (i + 1));
        [out[i], out[j]] = [out[j]!, out[i]!];
      }
      return out;
    };
    // Jobs from code, and a runtime schedule whose handler one commit may know as "report" and
    // another as "tick" (a change on its way): one slot, whose name sorts far from the other's.
    const jobs = ['k1', 'k2', 'k3', 'k4', 'k5', 'k6', 'k7', 'rt/k8', 'sx'];
    // Each commit: its share of the round's slots (so they do not all meet at the same first key),
    // its own name for the schedule, in its own order.
    const batch = (slots: FireRequest[], share: number) => {
      const handler = random() < 0.5 ? 'report' : 'tick';
      const mine = slots.filter(() => random() < share);
      return shuffled(mine.map((f) => (f.job === 'rt/k8' ? { ...f, job: `${handler}/k8` } : f)));
    };
    const failures: string[] = [];
    const wanted = new Set<string>();
    let committed = 0;
    try {
      for (let round = 0; round < 80; round++) {
        // Two slots per job, each commit a different order of them (a tie in a follower's queue);
        // every other round only the schedule and "sx", whose names sort on either side of it.
        const some = round % 2 === 0 ? jobs : ['rt/k8', 'sx'];
        const slots: FireRequest[] = some.flatMap((job) => [fire(job, 2 * round), fire(job, 2 * round + 1)]);
        const share = round % 2 === 0 ? 0.75 : 1;
        const batches = [batch(slots, share), batch(slots, share), batch(slots, share)];
        for (const f of batches.flat()) wanted.add(`${slotOwner(f.job)}@${f.scheduledAt.getTime()}`);
        const results = await Promise.allSettled([
          fast.fires.commitStandInFires(batches[0]!, standIn('f1')),
          fast.fires.commitStandInFires(batches[1]!, standIn('f2')),
          fast.fires.commitFires(
            batches[2]!.map((s) => ({ ...s, trigger: 'schedule' as const })),
            leader(30n),
          ),
        ]);
        for (const r of results) {
          if (r.status === 'fulfilled') committed += r.value.committed.length;
          else failures.push(`${(r.reason as { code?: string }).code}: ${(r.reason as Error).message}`);
        }
      }
    } finally {
      await pool.end();
    }
    assert.deepEqual(failures, [], 'every commit went through');
    assert.equal(committed, wanted.size, 'and together they committed each slot asked for once');
  });
});
