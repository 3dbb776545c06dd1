/**
 * Runtime schedules, one-off runs and backfill end to end: three in-process replicas (real
 * PostgreSQL ledger, real Redis, a shared in-memory lease), driven through the admin API. The
 * leader is stopped in the middle of a schedule update and of a backfill; the ledger is then
 * checked slot by slot against the boundary rule (src/ledger/schedule-ledger.ts).
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { pino } from 'pino';
import { defineJob } from '../../src/jobs/define-job.js';
import { MemoryLeaseBackend, MemoryLeaseStore } from '../../src/locks/memory.js';
import { Replica } from '../../src/replica/replica.js';
import { AdminClient } from '../../src/admin/client.js';
import { CronSchedule } from '../../src/cron/cron-schedule.js';
import { tablesIn } from '../../src/db/tables.js';
import { readOccurrences } from '../../src/ledger/occurrence-reads.js';
import { createTestDatabase, type TestDatabase } from '../support/postgres-database.js';
import { SHARED_REDIS_URL } from './failover-scenario.js';
import { firstLeader } from '../admin/support.js';

const TOKEN = 'runtime-test-token-0123456789';
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

interface Version {
  version: number;
  effective_at: Date;
  after: { cron: string; timezone: string; paused: boolean; payload: unknown } | null;
}

describe('runtime schedules, one-off runs and backfill across three replicas', { timeout: 180_000 }, () => {
  let db: TestDatabase;
  const store = new MemoryLeaseStore();
  const namespace = `rt${randomUUID().slice(0, 8)}`;
  const replicas: Replica[] = [];
  const stopped = new Set<Replica>();
  let startedAt = 0;

  const replica = (id: string) =>
    new Replica({
      replicaId: id,
      namespace,
      schema: db.schema,
      backend: new MemoryLeaseBackend({ store }),
      databaseUrl: db.url,
      redisUrl: SHARED_REDIS_URL,
      jobs: [
        // Every second from code; the seconds before the replicas started are what a backfill fills.
        defineJob({
          name: 'second',
          schedule: '* * * * * *',
          handler: async (ctx) => {
            await ctx.transaction(async (tx) => {
              await tx.query('INSERT INTO rt_effects (run_id, job) VALUES ($1, $2)', [ctx.runId, ctx.jobName]);
            });
          },
        }),
        defineJob({
          name: 'report',
          // Fires from code only once a year: the runs below come from runtime schedules, one-off
          // requests and backfills of this handler.
          schedule: '0 0 1 1 *',
          handler: async (ctx) => {
            await ctx.transaction(async (tx) => {
              await tx.query('INSERT INTO rt_effects (run_id, job, payload) VALUES ($1, $2, $3)', [
                ctx.runId,
                ctx.jobName,
                JSON.stringify(ctx.payload ?? null),
              ]);
            });
          },
        }),
      ],
      election: { ttlMs: 2000 },
      shutdownGraceMs: 500,
      admin: { port: 0, token: TOKEN },
      logger: pino({ level: process.env.CRONWARDEN_LOG_LEVEL ?? 'silent' }),
    });

  const live = () => replicas.filter((r) => !stopped.has(r));
  const leader = () => firstLeader(live(), 15_000);
  const follower = async () => {
    const l = await leader();
    return live().find((r) => r !== l)!;
  };
  const client = (r: Replica) => new AdminClient({ url: r.adminUrl!, token: TOKEN, timeoutMs: 30_000 });
  const stop = async (r: Replica) => {
    stopped.add(r);
    await r.stop();
  };

  before(async () => {
    db = await createTestDatabase();
    await db.pool.query(
      'CREATE TABLE rt_effects (run_id bigint PRIMARY KEY, job text NOT NULL, payload jsonb, at timestamptz DEFAULT now())',
    );
    startedAt = Math.floor(Date.now() / 1000) * 1000;
    for (const id of ['rt-a', 'rt-b', 'rt-c']) replicas.push(replica(id));
    for (const r of replicas) await r.start();
  });

  after(async () => {
    await Promise.all(live().map((r) => r.stop()));
    await db?.drop();
  });

  it('create, update (leader stopped in the middle), pause, resume, delete: each slot once, under the version in effect at it', async () => {
    const api = client(await follower());
    const { body: created } = await api.mutate<{ schedule: { job: string; version: number } }>('/api/schedules', {
      id: 'acme',
      handler: 'report',
      schedule: '* * * * * *',
      payload: { customer: 'acme', v: 1 },
    });
    assert.equal(created.schedule.job, 'report/acme');
    const createdAt = Date.now();
    // Picked up within a second (generous bound for a loaded machine): the first run commits soon.
    const first = await waitFor(async () => (await runs(db, 'report/acme'))[0], 10_000);
    assert.ok(first.created_at.getTime() - createdAt < 3000, `first run ${first.created_at.toISOString()}`);
    await sleep(2500);

    // The update and the leader's stop at the same moment: the next leader carries on.
    const old = await leader();
    const [{ body: updated }] = await Promise.all([
      api.mutate<{ schedule: { version: number } }>(
        '/api/schedules/acme',
        { schedule: '*/2 * * * * *', payload: { customer: 'acme', v: 2 } },
        'PATCH',
      ),
      stop(old),
    ]);
    assert.equal(updated.schedule.version, 2);
    await leader();
    await sleep(5000);
    const api2 = client(await follower());
    await api2.mutate('/api/schedules/acme/pause');
    await sleep(3000);
    await api2.mutate('/api/schedules/acme/resume');
    await sleep(4000);
    await api2.mutate('/api/schedules/acme', undefined, 'DELETE');
    await sleep(3000);

    const versions = (
      await db.pool.query<Version>(
        "SELECT version, effective_at, after FROM cw_schedule_versions WHERE schedule_id = 'acme' ORDER BY version",
      )
    ).rows;
    assert.deepEqual(
      versions.map((v) => v.version),
      [1, 2, 3, 4, 5],
    );
    const all = await runs(db, 'report/acme');
    const deletedAt = versions[4]!.effective_at.getTime();
    // Every committed slot is one of the version in effect at its instant, recorded with it.
    for (const run of all) {
      const at = run.scheduled_at.getTime();
      const v = inEffect(versions, at);
      assert.ok(v?.after && !v.after.paused, `slot ${run.scheduled_at.toISOString()} fired while paused or deleted`);
      assert.equal(run.schedule_version, v.version, `slot ${run.scheduled_at.toISOString()}`);
      assert.equal(CronSchedule.parse(v.after.cron).nextAfter(at - 1), at, `not a slot of v${v.version}`);
      assert.ok(at < deletedAt, 'a slot fired after the delete');
    }
    // Every slot due under each active version, from the first run to the delete, fired (once:
    // the unique key; asserted again here).
    const fromMs = versions[0]!.effective_at.getTime();
    const expected: number[] = [];
    for (const [i, v] of versions.entries()) {
      if (!v.after || v.after.paused) continue;
      const start = Math.max(fromMs - 1, v.effective_at.getTime() - 1);
      const end = (versions[i + 1]?.effective_at.getTime() ?? deletedAt) - 1;
      expected.push(...CronSchedule.parse(v.after.cron).between(start, end));
    }
    assert.deepEqual(
      all.map((r) => r.scheduled_at.getTime()),
      expected,
      'the slots fired are exactly the slots due under the versions in effect',
    );
    // cronwarden explain reads each version's slots under its own era (a paused or deleted span has
    // none due): every instant from the first run to the delete fired, none unanswered.
    const occ = await readOccurrences(db.pool, tablesIn(db.schema), {
      job: 'report/acme',
      from: new Date(all[0]!.scheduled_at.getTime()),
      to: new Date(deletedAt - 1),
      now: new Date(),
    });
    assert.deepEqual(
      occ.entries.map((e) => e.outcome).filter((o) => o !== 'fired'),
      [],
      JSON.stringify(occ.entries),
    );
    assert.equal(
      occ.entries.reduce((n, e) => n + e.count, 0),
      all.length,
      'explain enumerates exactly the slots due under the versions in effect',
    );
    assert.deepEqual(
      occ.eras.map((e) => e.expression),
      ['* * * * * *', '*/2 * * * * *', '(stopped)', '*/2 * * * * *'],
    );
    const open = await db.pool.query(
      "SELECT expression, from_at FROM cw_schedule_eras WHERE job = '/acme' AND to_at IS NULL",
    );
    assert.deepEqual(
      open.rows.map((r) => [r.expression, r.from_at.getTime()]),
      [['(stopped)', deletedAt]],
      'the delete opened an era with nothing due, from when it took effect',
    );
    // Each run's handler ran once with its version's payload.
    await waitFor(async () => {
      const n = await db.pool.query<{ n: number }>(
        "SELECT count(*)::int AS n FROM rt_effects WHERE job = 'report/acme'",
      );
      return n.rows[0]!.n === all.length ? true : undefined;
    }, 20_000);
    const effects = await db.pool.query<{ run_id: string; payload: { v: number } }>(
      "SELECT run_id::text, payload FROM rt_effects WHERE job = 'report/acme'",
    );
    const byRun = new Map(effects.rows.map((e) => [e.run_id, e.payload]));
    for (const run of all)
      assert.equal(byRun.get(run.id)?.v, run.schedule_version === 1 ? 1 : 2, `payload of run ${run.id}`);
    // Versions keep who and what changed.
    const show = await client(await follower()).get<{ versions: { actor: string; action: string }[] }>(
      '/api/schedules/acme',
    );
    assert.deepEqual(
      show.versions.map((v) => `${v.action}:${v.actor}`),
      ['create:admin', 'update:admin', 'pause:admin', 'resume:admin', 'delete:admin'],
    );
  });

  it('a bad cron or zone is refused with the same message as defineJob, and nothing is stored', async () => {
    const api = client(await follower());
    let expected = '';
    try {
      defineJob({ name: 'bad', schedule: '61 * * * *', handler: () => {} });
    } catch (err) {
      expected = (err as Error).message;
    }
    await assert.rejects(
      api.mutate('/api/schedules', { id: 'bad', handler: 'report', schedule: '61 * * * *' }),
      (err: Error) => err.message.includes(expected),
    );
    await assert.rejects(
      api.mutate('/api/schedules', { id: 'bad', handler: 'report', schedule: '* * * * *', timezone: 'Mars/Olympus' }),
      /timezone/,
    );
    await assert.rejects(api.mutate('/api/schedules', { id: 'bad', handler: 'nope', schedule: '* * * * *' }), /nope/);
    const n = await db.pool.query("SELECT 1 FROM cw_schedules WHERE id = 'bad' AND version > 0");
    assert.equal(n.rowCount, 0);
  });

  it('a one-off run fires once per key; the second request returns the first run', async () => {
    const api = client(await follower()); // a follower: the client follows the 409 to the leader
    const at = new Date(Date.now() + 1500).toISOString();
    const body = { key: 'invoice-42', at, payload: { invoice: 42 } };
    const [a, b] = await Promise.all([
      api.mutate<{ runId: string; created: boolean }>('/api/jobs/report/once', body),
      api.mutate<{ runId: string; created: boolean }>('/api/jobs/report/once', { ...body, payload: { other: 1 } }),
    ]);
    assert.equal(a.body.runId, b.body.runId);
    assert.deepEqual([a.body.created, b.body.created].sort(), [false, true]);
    const effect = await waitFor(async () => {
      const res = await db.pool.query<{ payload: unknown; at: Date }>(
        'SELECT payload, at FROM rt_effects WHERE run_id = $1',
        [a.body.runId],
      );
      return res.rows[0];
    }, 15_000);
    // The request that committed the run (whichever came first) gave it its payload.
    assert.deepEqual(effect.payload, a.body.created ? { invoice: 42 } : { other: 1 });
    assert.ok(effect.at.getTime() >= Date.parse(at) - 50, 'ran before its instant');
    const again = await api.mutate<{ runId: string; created: boolean }>('/api/jobs/report/once', body);
    assert.deepEqual(again.body, { ...again.body, runId: a.body.runId, created: false });
    const n = await db.pool.query("SELECT 1 FROM cw_runs WHERE job = 'report' AND once_key = 'invoice-42'");
    assert.equal(n.rowCount, 1);
  });

  it('backfill: every missing slot once, through a leader failover, and nothing the second time', async () => {
    // Three replicas again (one was stopped above).
    const fresh = replica('rt-d');
    replicas.push(fresh);
    await fresh.start();
    const api = client(await follower());
    await api.mutate('/api/schedules', { id: 'past', handler: 'report', schedule: '* * * * * *', paused: true });
    // Before the replicas started: no slot of this range is in the ledger yet.
    const to = new Date(startedAt - 2000);
    const from = new Date(to.getTime() - 119_000); // 120 slots
    const step = (body: object) =>
      api.mutate<{ processed: number; inserted: number; next: string | null; total: number }>(
        '/api/jobs/report%2Fpast/backfill',
        body,
      );
    // A runtime schedule has no slots before it was created, nor while paused: nothing to fill.
    const none = await step({ from: from.toISOString(), to: new Date().toISOString(), limit: 5000 });
    assert.deepEqual([none.body.total, none.body.inserted], [0, 0]);
    // The yearly handler from code, six years: 6 slots, none there yet.
    const code = await api.mutate<{ inserted: number; total: number }>('/api/jobs/report/backfill', {
      from: '2020-01-01T00:00:00Z',
      to: '2025-12-31T00:00:00Z',
    });
    assert.deepEqual([code.body.total, code.body.inserted], [6, 6]);
    const codeAgain = await api.mutate<{ inserted: number }>('/api/jobs/report/backfill', {
      from: '2020-01-01T00:00:00Z',
      to: '2025-12-31T00:00:00Z',
    });
    assert.equal(codeAgain.body.inserted, 0, 'a second backfill adds nothing');

    const old = await leader();
    let inserted = 0;
    let cursor = from.toISOString();
    let total = 0;
    let failovers = 0;
    for (let i = 0; i < 100 && cursor; i++) {
      try {
        const r = await api.mutate<{ processed: number; inserted: number; next: string | null; total: number }>(
          '/api/jobs/second/backfill',
          { from: cursor, to: to.toISOString(), limit: 20, rate: 20 },
        );
        total ||= r.body.total;
        inserted += r.body.inserted;
        cursor = r.body.next ?? '';
        if (i === 1 && failovers === 0) {
          failovers++;
          void stop(old); // mid-range: the next steps go to the next leader
        }
      } catch {
        await sleep(500);
      }
    }
    assert.equal(failovers, 1);
    assert.equal(total, 120);
    const histRuns = await db.pool.query<{ n: number; d: number }>(
      `SELECT count(*)::int AS n, count(DISTINCT scheduled_at)::int AS d FROM cw_runs
       WHERE job = 'second' AND scheduled_at BETWEEN $1 AND $2`,
      [from, to],
    );
    assert.equal(histRuns.rows[0]!.n, 120, 'every slot of the range is in the ledger');
    assert.equal(histRuns.rows[0]!.d, 120, 'once each');
    assert.ok(inserted <= 120);
    // Twice at once on two replicas: nothing more.
    assert.equal(live().length, 2);
    const [x, y] = await Promise.all(
      live().map((r) =>
        client(r).mutate<{ inserted: number }>('/api/jobs/second/backfill', {
          from: from.toISOString(),
          to: to.toISOString(),
          limit: 5000,
          rate: 2000,
        }),
      ),
    );
    assert.equal(x!.body.inserted + y!.body.inserted, 0);
  });

  it("a handler changed back and forth, then a failover: the catch-up goes on from the schedule's last slot, each slot once", async () => {
    // Issue 25 #1: the catch-up started from "report/flip"'s own last fire, before the change, and
    // fired again, as "report/flip", the slots that had run as "second/flip".
    const api = client(await follower());
    await api.mutate('/api/schedules', { id: 'flip', handler: 'report', schedule: '* * * * * *' });
    const named = async (job: string, n: number) =>
      waitFor(async () => ((await runs(db, job)).length >= n ? true : undefined), 15_000);
    await named('report/flip', 2);
    await api.mutate('/api/schedules/flip', { handler: 'second' }, 'PATCH');
    await named('second/flip', 3);
    const old = await leader();
    await api.mutate('/api/schedules/flip', { handler: 'report' }, 'PATCH');
    await stop(old);
    await leader();
    await sleep(3000);
    await client(live()[0]!).mutate('/api/schedules/flip', undefined, 'DELETE');
    const twice = await db.pool.query(
      `SELECT scheduled_at, array_agg(job || ' ' || trigger) AS runs FROM cw_runs
       WHERE split_part(job, '/', 2) = 'flip' AND trigger NOT IN ('manual', 'once')
       GROUP BY scheduled_at HAVING count(*) > 1`,
    );
    assert.deepEqual(twice.rows, [], 'no slot of the schedule ran twice, under any name');
    const all = await db.pool.query<{ n: number }>(
      "SELECT count(*)::int AS n FROM cw_runs WHERE split_part(job, '/', 2) = 'flip' AND job LIKE 'report/%'",
    );
    assert.ok(all.rows[0]!.n >= 3, 'it fired as report/flip again after the failover');
  });

  it('no fire transaction started before its slot: created_at >= scheduled_at on every run but one-offs', async () => {
    // The replicas keep time by the ledger's clock, never ahead of it (issue 25 #3).
    const fired = await db.pool.query<{ n: number }>(
      "SELECT count(*)::int AS n FROM cw_runs WHERE trigger = 'schedule'",
    );
    assert.ok(fired.rows[0]!.n >= 30, `only ${fired.rows[0]!.n} scheduled fires: too few to tell`);
    const early = await db.pool.query(
      `SELECT job, trigger, scheduled_at, created_at FROM cw_runs WHERE trigger <> 'once' AND created_at < scheduled_at`,
    );
    assert.deepEqual(early.rows, []);
  });
});

async function runs(db: TestDatabase, job: string) {
  const res = await db.pool.query<{ id: string; scheduled_at: Date; created_at: Date; schedule_version: number }>(
    'SELECT id::text, scheduled_at, created_at, schedule_version FROM cw_runs WHERE job = $1 ORDER BY scheduled_at',
    [job],
  );
  return res.rows;
}

function inEffect(versions: Version[], at: number): Version | undefined {
  return versions.filter((v) => v.effective_at.getTime() <= at).at(-1);
}

async function waitFor<T>(fn: () => Promise<T | undefined>, timeoutMs: number): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const v = await fn();
    if (v !== undefined) return v;
    if (Date.now() > deadline) throw new Error(`not within ${timeoutMs} ms`);
    await sleep(100);
  }
}
