/**
 * Issue 11's field failure, reproduced with real processes: three replicas, every job guards its
 * write with ctx.fence('res-<job>', tx) inside ctx.transaction (as the README suggests for a
 * resource), the leader is killed with SIGKILL, and the next leader catches up several slots of
 * every job at once. Their runs are claimed in any order; before slot tokens, an earlier slot that
 * came second was refused as stale, retried and failed. Now every run settles as the documented
 * rule says: completed with exactly one effect, or superseded (a later slot of the resource wrote
 * first) with none; none failed; and each resource was written in slot order.
 */
import { it } from 'node:test';
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { setTimeout as sleep } from 'node:timers/promises';
import { runStates } from '../../src/db/schema.js';
import { checkHistory, readHistory } from '../../src/drill/checker.js';
import { createTestDatabase } from '../support/postgres-database.js';
import { ReplicaChild, waitForLeader } from '../support/replica-cluster.js';
import { SHARED_REDIS_URL } from './failover-scenario.js';

const JOBS = 6;
const TTL_MS = 3000;

it(
  'a fenced catch-up after a leader SIGKILL: every run completed once or superseded, none failed',
  { timeout: 120_000 },
  async () => {
    const db = await createTestDatabase();
    await db.pool.query(
      `CREATE TABLE cw_test_effects (id bigserial PRIMARY KEY, run_id bigint NOT NULL, job text NOT NULL, scheduled_at timestamptz NOT NULL,
       token bigint NOT NULL, replica text NOT NULL)`,
    );
    const namespace = `fc${randomUUID().slice(0, 8)}`;
    const replicas = ['r1', 'r2', 'r3'].map(
      (id) =>
        new ReplicaChild({
          replicaId: id,
          namespace,
          backend: { kind: 'postgres', url: db.url },
          databaseUrl: db.url,
          redisUrl: SHARED_REDIS_URL,
          jobs: JOBS,
          ttlMs: TTL_MS,
          fence: true,
          schema: db.schema,
          // Stand-in followers would commit the slots of the gap one second at a time: off, so the
          // next leader catches up several slots of every job at once, the case under test.
          standInGraceMs: 0,
        }),
    );
    try {
      const first = await waitForLeader(replicas, 60_000);
      await sleep(4000);
      first.signal('SIGKILL');
      const second = await waitForLeader(replicas, TTL_MS * 5, [first]);
      await sleep(5000);
      const catchUps = [...second.events].filter((e) => e.event === 'catchup').length;
      assert.ok(
        catchUps >= JOBS * 2,
        `the new leader caught up ${catchUps} fires; expected several slots of every job`,
      );

      const t1 = new Date(Math.floor((Date.now() - 2000) / 1000) * 1000);
      const from = new Date(0);
      const settledBy = Date.now() + 30_000;
      while (Date.now() < settledBy) {
        const open = await db.pool.query<{ n: number }>(
          `SELECT count(*)::int AS n FROM cw_runs WHERE scheduled_at <= $1 AND state IN ('pending', 'running', 'retrying')`,
          [t1],
        );
        if (open.rows[0]!.n === 0) break;
        await sleep(250);
      }
      for (const r of replicas) if (r !== first) r.signal('SIGTERM');

      const runs = await db.pool.query<{ state: string; n: number }>(
        'SELECT state, count(*)::int AS n FROM cw_runs WHERE scheduled_at <= $1 GROUP BY state',
        [t1],
      );
      const byState = Object.fromEntries(runs.rows.map((r) => [r.state, r.n]));
      assert.deepEqual(
        Object.keys(byState).filter((s) => s !== 'completed' && s !== 'superseded'),
        [],
        `every run completed or superseded: ${JSON.stringify(byState)}`,
      );

      // One effect per completed run, none for a superseded one.
      const effects = await db.pool.query<{ state: string; effects: number }>(
        `SELECT r.state, (SELECT count(*)::int FROM cw_test_effects e WHERE e.run_id = r.id) AS effects FROM cw_runs r WHERE r.scheduled_at <= $1`,
        [t1],
      );
      for (const row of effects.rows)
        assert.equal(row.effects, row.state === 'completed' ? 1 : 0, `a ${row.state} run has ${row.effects} effects`);

      // Each resource was written in slot order (the fence row serialises its writers).
      const order = await db.pool.query<{ job: string; scheduled_at: Date }>(
        'SELECT job, scheduled_at FROM cw_test_effects ORDER BY id',
      );
      const lastByJob = new Map<string, number>();
      for (const e of order.rows) {
        const t = e.scheduled_at.getTime();
        assert.ok(t > (lastByJob.get(e.job) ?? -Infinity), `${e.job} written out of slot order`);
        lastByJob.set(e.job, t);
      }

      // And the ledger itself: one run per slot, none missing, tokens in order (I1-I3).
      const t0 = (await db.pool.query<{ t: Date }>('SELECT min(scheduled_at) AS t FROM cw_runs')).rows[0]!.t.getTime();
      const times = Array.from({ length: Math.floor((t1.getTime() - t0) / 1000) + 1 }, (_, i) => t0 + i * 1000);
      const expected = new Map(Array.from({ length: JOBS }, (_, i) => [`job-${i}`, times] as [string, number[]]));
      const firedStates = [...runStates]; // every state counts as fired, superseded included
      const report = checkHistory(await readHistory(db.pool, { from, to: t1 }), { expected, firedStates });
      assert.deepEqual(report.violations, []);
      console.log(`fenced catch-up: ${catchUps} catch-up fires; runs ${JSON.stringify(byState)}`);
    } finally {
      for (const r of replicas) r.signal('SIGKILL');
      await Promise.all(replicas.map((r) => r.exited));
      await db.drop();
    }
  },
);
