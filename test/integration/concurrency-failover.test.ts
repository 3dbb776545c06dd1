/**
 * A concurrency limit across real processes: three replicas, five jobs due each second sharing the
 * key "shared-api" with limit 2. Each handler records when it entered and left (outside the run's
 * transaction). The replica holding both slots is killed with SIGKILL mid-handler. From the spans:
 * never more than 2 handlers at once (a killed handler counts until the kill), the killed runs are
 * taken over and finished once elsewhere, and the slots are not leaked (runs go on after it).
 */
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { setTimeout as sleep } from 'node:timers/promises';
import { createTestDatabase } from '../support/postgres-database.js';
import { createEffectsTable, replicaProcesses, type ReplicaChild } from '../support/replica-cluster.js';
import { SHARED_REDIS_URL } from './failover-scenario.js';

interface Span {
  run_id: string;
  replica: string;
  entered: number;
  exited: number | null;
}

/** The most spans open at one instant (an exit at the instant of an entry does not overlap it). */
function maxOverlap(spans: { from: number; to: number }[]): number {
  const edges = spans.flatMap((s) => [
    { at: s.from, d: 1 },
    { at: s.to, d: -1 },
  ]);
  edges.sort((a, b) => a.at - b.at || a.d - b.d);
  let open = 0;
  let most = 0;
  for (const e of edges) most = Math.max(most, (open += e.d));
  return most;
}

describe('a concurrency limit across three replica processes', () => {
  it(
    'limit 2 shared by five jobs: at most 2 handlers at once through a kill -9 of the replica holding both slots',
    { timeout: 150_000 },
    async () => {
      const db = await createTestDatabase();
      await createEffectsTable(db);
      await db.pool.query(
        'CREATE TABLE cw_test_spans (id serial PRIMARY KEY, run_id bigint NOT NULL, replica text NOT NULL, entered_at timestamptz NOT NULL, exited_at timestamptz)',
      );
      const replicas = replicaProcesses(db, {
        namespace: `lim${randomUUID().slice(0, 8)}`,
        redisUrl: SHARED_REDIS_URL,
        jobs: 5,
        ttlMs: 2000,
        effectAfterMs: 1500,
        handlerMs: 700,
        spans: true,
        jobOptions: { concurrency: { key: 'shared-api', limit: 2 }, overlap: 'skip' },
      });
      try {
        // The moment one replica runs both slots' handlers, in the part before their effect.
        const deadline = Date.now() + 60_000;
        let victim: ReplicaChild | undefined;
        let killedAt = 0;
        while (!victim && Date.now() < deadline) {
          const open = await db.pool.query<{ replica: string; n: number }>(
            `SELECT replica, count(*)::int AS n FROM cw_test_spans
             WHERE exited_at IS NULL AND entered_at > clock_timestamp() - interval '1 second'
             GROUP BY replica HAVING count(*) = 2`,
          );
          const holder = open.rows[0]?.replica;
          victim = replicas.find((r) => r.config.replicaId === holder);
          if (victim) {
            victim.signal('SIGKILL');
            await victim.exited;
            killedAt = (await db.pool.query<{ now: Date }>('SELECT clock_timestamp() AS now')).rows[0]!.now.getTime();
          } else await sleep(100);
        }
        assert.ok(victim, 'a replica ran both slots within 60 s');
        const killedRuns = (
          await db.pool.query<{ run_id: string }>(
            'SELECT run_id::text FROM cw_test_spans WHERE replica = $1 AND exited_at IS NULL',
            [victim.config.replicaId],
          )
        ).rows.map((r) => r.run_id);
        assert.equal(killedRuns.length, 2);

        await sleep(15_000);
        const survivors = replicas.filter((r) => r !== victim);
        for (const r of survivors) r.signal('SIGTERM');
        await Promise.all(survivors.map((r) => r.exited));
        const endedAt = (await db.pool.query<{ now: Date }>('SELECT clock_timestamp() AS now')).rows[0]!.now.getTime();

        const spans = (
          await db.pool.query<{ run_id: string; replica: string; entered_at: Date; exited_at: Date | null }>(
            'SELECT run_id::text, replica, entered_at, exited_at FROM cw_test_spans ORDER BY entered_at',
          )
        ).rows.map((s): Span => ({
          run_id: s.run_id,
          replica: s.replica,
          entered: s.entered_at.getTime(),
          exited: s.exited_at?.getTime() ?? null,
        }));
        const intervals = spans.map((s) => ({
          from: s.entered,
          to: s.exited ?? (s.replica === victim.config.replicaId ? killedAt : endedAt),
        }));
        const most = maxOverlap(intervals);
        assert.ok(most <= 2, `at most 2 handlers at once: ${most}`);
        assert.equal(most, 2, 'the limit is used, not undershot');

        // The killed runs were taken over and completed once, elsewhere.
        const killed = await db.pool.query<{ id: string; state: string; effects: string[] }>(
          `SELECT r.id::text, r.state, array(SELECT e.replica FROM cw_test_effects e WHERE e.run_id = r.id) AS effects
           FROM cw_runs r WHERE r.id = ANY($1)`,
          [killedRuns],
        );
        for (const r of killed.rows) {
          assert.equal(r.state, 'completed', `run ${r.id}`);
          assert.equal(r.effects.length, 1, `run ${r.id}: one effect`);
          assert.notEqual(r.effects[0], victim.config.replicaId, `run ${r.id} finished by a survivor`);
        }
        const doubled = await db.pool.query('SELECT run_id FROM cw_test_effects GROUP BY run_id HAVING count(*) > 1');
        assert.equal(doubled.rowCount, 0, 'no run has two effects');
        // The slots were not leaked: handlers kept running at the limit after the kill.
        const after = spans.filter((s) => s.entered > killedAt && s.exited !== null);
        assert.ok(after.length >= 8, `${after.length} handlers ran to the end after the kill`);
        const overlapAfter = maxOverlap(
          after.filter((s) => s.entered > killedAt + 5000).map((s) => ({ from: s.entered, to: s.exited! })),
        );
        assert.equal(overlapAfter, 2, 'both slots in use after the kill');
        console.log(
          `concurrency limit through kill -9: ${spans.length} handler spans, max ${most} at once, ${after.length} after the kill`,
        );
      } finally {
        for (const r of replicas) r.signal('SIGKILL');
        await Promise.all(replicas.map((r) => r.exited));
        await db.drop();
      }
    },
  );
});
