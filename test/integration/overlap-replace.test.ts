/**
 * overlap: 'replace' end to end: two in-process replicas (real PostgreSQL ledger, real Redis), a
 * job whose runs never end by themselves. At its next fire the leader cancels the running run in
 * the ledger and over the Redis control channel; whichever replica executes it sees its signal
 * abort, the run is recorded cancelled, and the new run starts.
 */
import { it } from 'node:test';
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { pino } from 'pino';
import { defineJob } from '../../src/jobs/define-job.js';
import { MemoryLeaseBackend, MemoryLeaseStore } from '../../src/locks/memory.js';
import { Replica } from '../../src/replica/replica.js';
import { createTestDatabase } from '../support/postgres-database.js';
import { SHARED_REDIS_URL } from './failover-scenario.js';

it(
  "overlap 'replace': the running run is aborted through its signal and recorded cancelled; the next one runs",
  { timeout: 60_000 },
  async () => {
    const db = await createTestDatabase();
    const store = new MemoryLeaseStore();
    const namespace = `ovr${randomUUID().slice(0, 8)}`;
    const started: string[] = [];
    const aborted = new Map<string, string>();
    const job = defineJob({
      name: 'endless',
      schedule: '*/2 * * * * *',
      overlap: 'replace',
      handler: async (ctx) => {
        started.push(ctx.runId.toString());
        await new Promise<void>((resolve) => ctx.signal.addEventListener('abort', () => resolve(), { once: true }));
        aborted.set(ctx.runId.toString(), String((ctx.signal.reason as Error)?.message ?? ctx.signal.reason));
      },
    });
    const replicas = ['ovr-a', 'ovr-b'].map(
      (id) =>
        new Replica({
          replicaId: id,
          namespace,
          schema: db.schema,
          backend: new MemoryLeaseBackend({ store }),
          databaseUrl: db.url,
          redisUrl: SHARED_REDIS_URL,
          jobs: [job],
          election: { ttlMs: 3000 },
          shutdownGraceMs: 500,
          logger: pino({ level: 'silent' }),
        }),
    );
    try {
      for (const r of replicas) await r.start();
      const deadline = Date.now() + 30_000;
      let runs: { id: string; state: string }[] = [];
      while (Date.now() < deadline) {
        runs = (
          await db.pool.query<{ id: string; state: string }>(
            "SELECT id, state FROM cw_runs WHERE job = 'endless' ORDER BY scheduled_at",
          )
        ).rows;
        // The leader cancels the running run just before it commits the next: wait for that one too.
        const done = runs.filter((r) => r.state === 'cancelled');
        if (done.length >= 2 && runs.at(-1)!.state !== 'cancelled' && done.every((r) => aborted.has(r.id))) break;
        await new Promise((r) => setTimeout(r, 100));
      }
      const cancelled = runs.filter((r) => r.state === 'cancelled');
      assert.ok(cancelled.length >= 2, `runs: ${JSON.stringify(runs)}`);
      for (const run of cancelled) {
        assert.ok(started.includes(run.id), `run ${run.id} was cancelled without having started`);
        assert.match(aborted.get(run.id) ?? '', /cancel/, `run ${run.id}'s handler saw no cancel`);
      }
      // Never two running at once: every run but the newest was cancelled before the next started.
      const running = runs.filter((r) => r.state === 'running');
      assert.ok(running.length <= 1, `runs: ${JSON.stringify(runs)}`);
      const newest = runs.at(-1)!;
      assert.ok(
        !cancelled.some((r) => r.id === newest.id),
        `the newest run is the one left running: ${JSON.stringify(runs)}`,
      );
    } finally {
      for (const r of replicas) await r.stop();
      await db.drop();
    }
  },
);
