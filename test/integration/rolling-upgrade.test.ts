/**
 * A rolling deploy (issue 13): three replicas replaced one by one while jobs fire every second.
 * The new code adds a job, removes one and changes one's schedule. Nothing fails: an old replica
 * handed a run of the added job hands it back (no retry used) for a new one; the removed job's
 * runs are settled `cancelled` with the reason once no live replica defines it; the unchanged
 * job fires every slot exactly once with one effect; the members view shows the disagreement
 * while the roll is under way and agreement after it.
 */
import { after, before, it } from 'node:test';
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { setTimeout as sleep } from 'node:timers/promises';
import { pino } from 'pino';
import { memberAgreement } from '../../src/admin/member-agreement.js';
import { tablesIn } from '../../src/db/tables.js';
import { checkHistory, readHistory } from '../../src/drill/checker.js';
import { defineJob, type JobDefinition } from '../../src/jobs/define-job.js';
import type { JobContext } from '../../src/jobs/job-context.js';
import { listMembers } from '../../src/ledger/admin-reads.js';
import { PostgresLeaseBackend } from '../../src/locks/postgres.js';
import { Replica } from '../../src/replica/replica.js';
import { createTestDatabase, type TestDatabase } from '../support/postgres-database.js';
import { SHARED_REDIS_URL } from './failover-scenario.js';

let db: TestDatabase;
before(async () => {
  db = await createTestDatabase();
  await db.pool.query(
    'CREATE TABLE roll_effects (run_id bigint NOT NULL, token bigint NOT NULL, job text NOT NULL, scheduled_at timestamptz NOT NULL, version text NOT NULL)',
  );
});
after(async () => {
  await db.drop();
});

function jobsOf(version: 'v1' | 'v2'): JobDefinition[] {
  const handler = async (ctx: JobContext) => {
    await ctx.transaction((tx) =>
      tx.query('INSERT INTO roll_effects (run_id, token, job, scheduled_at, version) VALUES ($1, $2, $3, $4, $5)', [
        ctx.runId,
        ctx.fencingToken.toString(),
        ctx.jobName,
        ctx.scheduledAt,
        version,
      ]),
    );
  };
  const keep = defineJob({ name: 'keep', schedule: '* * * * * *', handler });
  return version === 'v1'
    ? [
        keep,
        defineJob({ name: 'removed', schedule: '* * * * * *', handler }),
        defineJob({ name: 'changed', schedule: '*/2 * * * * *', handler }),
      ]
    : [
        keep,
        defineJob({ name: 'added', schedule: '* * * * * *', handler }),
        defineJob({ name: 'changed', schedule: '*/3 * * * * *', handler }),
      ];
}

it(
  'a rolling replacement with a job added, one removed and one rescheduled: nothing fails, the unchanged job fires every slot once',
  { timeout: 120_000 },
  async () => {
    const namespace = `roll${randomUUID().slice(0, 8)}`;
    const tables = tablesIn(db.schema);
    const start = async (id: string, version: 'v1' | 'v2') => {
      const replica = new Replica({
        replicaId: id,
        namespace,
        schema: db.schema,
        backend: new PostgresLeaseBackend({ connectionString: db.url, schema: db.schema }),
        databaseUrl: db.url,
        redisUrl: SHARED_REDIS_URL,
        jobs: jobsOf(version),
        version,
        election: { ttlMs: 2000 },
        worker: { lockDurationMs: 2000, stalledIntervalMs: 1000 },
        shutdownGraceMs: 2000,
        removedJobs: { intervalMs: 1000, liveWithinMs: 5000 },
        logger: pino({ level: 'silent' }),
      });
      await replica.start();
      return replica;
    };
    const live = new Map<string, Replica>();
    try {
      for (const id of ['a', 'b', 'c']) live.set(id, await start(`${id}-v1`, 'v1'));
      await sleep(4000);
      let sawDisagreement = false;
      for (const id of ['a', 'b', 'c']) {
        await live.get(id)!.stop();
        live.set(id, await start(`${id}-v2`, 'v2'));
        await sleep(3000);
        const agreement = memberAgreement(await listMembers(db.pool, tables));
        if (!agreement.jobsAgree && agreement.versions.length > 1) sawDisagreement = true;
      }
      assert.ok(sawDisagreement, 'the members view showed the replicas disagreeing during the roll');
      await sleep(4000);
      const after = memberAgreement(await listMembers(db.pool, tables));
      assert.deepEqual(after, { versions: ['v2'], jobsAgree: true, missing: {} });

      const t1 = new Date(Math.floor((Date.now() - 3000) / 1000) * 1000);
      const settledBy = Date.now() + 20_000;
      const open = async () =>
        (
          await db.pool.query<{ n: number }>(
            `SELECT count(*)::int AS n FROM ${tables.runs} WHERE scheduled_at <= $1 AND state IN ('pending', 'running', 'retrying')`,
            [t1],
          )
        ).rows[0]!.n;
      while ((await open()) > 0 && Date.now() < settledBy) await sleep(250);
      assert.equal(await open(), 0, 'every run up to the end of the window settled');

      const states = await db.pool.query<{ job: string; state: string; error: string | null; n: number }>(
        `SELECT job, state, min(error) AS error, count(*)::int AS n FROM ${tables.runs} WHERE scheduled_at <= $1 GROUP BY job, state ORDER BY job, state`,
        [t1],
      );
      assert.deepEqual(
        states.rows.filter((r) => r.state === 'failed'),
        [],
        'nothing failed',
      );
      for (const r of states.rows.filter((row) => row.state === 'cancelled')) {
        assert.equal(r.job, 'removed', `only the removed job's runs are cancelled (${JSON.stringify(r)})`);
        assert.match(r.error ?? '', /job removed: no live replica defines it/);
      }
      assert.ok(
        states.rows.some((r) => r.job === 'added' && r.state === 'completed'),
        'the added job fires once a replica that knows it leads',
      );
      const jobState = await db.pool.query<{ job: string }>(`SELECT job FROM ${tables.jobState} ORDER BY job`);
      assert.deepEqual(
        jobState.rows.map((r) => r.job),
        ['added', 'changed', 'keep'],
        "the removed job's state row is gone",
      );

      // The unchanged job: every slot once, completed, one effect each (I1, I2, I4).
      const t0 = (
        await db.pool.query<{ t: Date }>(`SELECT min(scheduled_at) AS t FROM ${tables.runs} WHERE job = 'keep'`)
      ).rows[0]!.t.getTime();
      const times = Array.from({ length: Math.floor((t1.getTime() - t0) / 1000) + 1 }, (_, i) => t0 + i * 1000);
      const history = await readHistory(db.pool, {
        from: new Date(t0),
        to: t1,
        jobPrefix: 'keep',
        schema: db.schema,
        effectsTable: 'roll_effects',
      });
      const report = checkHistory(history, { expected: new Map([['keep', times]]), requireCompleted: true });
      assert.deepEqual(report.violations, []);
      // And no slot of any job twice (the unique key), whatever schedule fired it.
      const doubled = await db.pool.query(
        `SELECT job, scheduled_at FROM ${tables.runs} WHERE trigger <> 'manual' GROUP BY job, scheduled_at HAVING count(*) > 1`,
      );
      assert.equal(doubled.rowCount, 0);
    } finally {
      for (const r of live.values()) await r.stop().catch(() => undefined);
    }
  },
);
