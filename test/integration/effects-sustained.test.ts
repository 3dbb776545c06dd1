/**
 * The measurement that motivated ctx.transaction, repeated against cronwarden: 3 replica
 * processes (each a worker, one the leader), 20 jobs every second, handlers that write their
 * effect and then work 1 s more, and a replica killed with SIGKILL (then restarted) every 10 s.
 * BullMQ job schedulers doubled 35 of 2,200 effects under this load; cronwarden must double none
 * and lose none.
 */
import { it } from 'node:test';
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { setTimeout as sleep } from 'node:timers/promises';
import { checkHistory, readHistory } from '../../src/drill/checker.js';
import { createTestDatabase } from '../support/postgres-database.js';
import { createEffectsTable, ReplicaChild, waitForLeader } from '../support/replica-cluster.js';
import type { ReplicaProcessConfig } from '../fixtures/replica-process.js';
import { SHARED_REDIS_URL } from './failover-scenario.js';

const JOBS = 20;
const KILLS = 4;

it(
  'sustained: 20 jobs/s, handlers working 1 s after their write, a SIGKILL every 10 s: zero doubled, zero missed effects',
  { timeout: 240_000 },
  async () => {
    const db = await createTestDatabase();
    await createEffectsTable(db);
    const namespace = `sus${randomUUID().slice(0, 8)}`;
    const config = (id: string): ReplicaProcessConfig => ({
      replicaId: id,
      namespace,
      schema: db.schema,
      backend: { kind: 'postgres', url: db.url },
      databaseUrl: db.url,
      redisUrl: SHARED_REDIS_URL,
      jobs: JOBS,
      ttlMs: 2000,
      lockDurationMs: 2000,
      handlerMs: 1000,
    });
    const replicas = ['r1', 'r2', 'r3'].map((id) => new ReplicaChild(config(id)));
    let generation = 0;
    try {
      await waitForLeader(replicas, 20_000);
      await sleep(3000);
      const from = new Date(Math.ceil(Date.now() / 1000) * 1000);
      for (let k = 0; k < KILLS; k++) {
        await sleep(10_000);
        // Kill a worker that is not the leader on even rounds and the leader on odd ones.
        const leader = replicas.find((r) => r.role === 'leader');
        const victim = k % 2 === 1 && leader ? leader : (replicas.find((r) => r !== leader) ?? replicas[0]!);
        victim.signal('SIGKILL');
        await victim.exited;
        const idx = replicas.indexOf(victim);
        replicas[idx] = new ReplicaChild(config(`${victim.id.split('.')[0]}.${++generation}`));
      }
      await sleep(5000);
      const to = new Date(Math.floor((Date.now() - 3000) / 1000) * 1000);
      // Let re-deliveries of the last killed worker's runs finish (BullMQ lock 2 s, stall check 1 s).
      const deadline = Date.now() + 60_000;
      while (Date.now() < deadline) {
        const open = await db.pool.query<{ n: number }>(
          `SELECT count(*)::int AS n FROM cw_runs WHERE scheduled_at BETWEEN $1 AND $2 AND state <> 'completed'`,
          [from, to],
        );
        if (open.rows[0]!.n === 0) break;
        await sleep(500);
      }
      const seconds = Math.round((to.getTime() - from.getTime()) / 1000) + 1;
      const times = Array.from({ length: seconds }, (_, i) => from.getTime() + i * 1000);
      const expected = new Map(Array.from({ length: JOBS }, (_, i) => [`job-${i}`, times] as [string, number[]]));
      const history = await readHistory(db.pool, { from, to, effectsTable: 'cw_test_effects', schema: db.schema });
      const report = checkHistory(history, { expected, requireCompleted: true });
      const skipped = await db.pool.query<{ n: number }>(
        'SELECT coalesce(sum(skipped_attempts), 0)::int AS n FROM cw_runs',
      );
      const redelivered = await db.pool.query<{ n: number }>(
        'SELECT count(*)::int AS n FROM cw_runs WHERE attempts > 1',
      );
      console.log(
        `sustained: ${report.expected} scheduled slots, ${history.effects?.length} effects, ${report.effectsDuplicated} doubled, ` +
          `${report.effectsMissing + report.missed} missed, ${redelivered.rows[0]!.n} runs re-delivered, ${skipped.rows[0]!.n} re-deliveries skipped as already done`,
      );
      assert.ok(report.expected >= JOBS * 40, `window too short: ${report.expected} slots`);
      assert.deepEqual(report.violations, []);
      assert.equal(report.effectsDuplicated, 0);
      assert.equal(report.effectsMissing + report.missed, 0);
    } finally {
      for (const r of replicas) r.signal('SIGKILL');
      await Promise.all(replicas.map((r) => r.exited));
      await db.drop();
    }
  },
);
