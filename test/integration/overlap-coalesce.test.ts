/**
 * overlap: 'coalesce' end to end: two in-process replicas (real PostgreSQL ledger, real Redis), a
 * job due every second whose handler takes 2.5 s. Every slot is accounted for: it ran, or it is
 * recorded skipped naming the run that stood for it, which ran after it came; that run's
 * ctx.coalesced counted it; no two handlers of the job ran at once.
 */
import { it } from 'node:test';
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { setTimeout as sleep } from 'node:timers/promises';
import { pino } from 'pino';
import { defineJob } from '../../src/jobs/define-job.js';
import { MemoryLeaseBackend, MemoryLeaseStore } from '../../src/locks/memory.js';
import { Replica } from '../../src/replica/replica.js';
import { createTestDatabase } from '../support/postgres-database.js';
import { SHARED_REDIS_URL } from './failover-scenario.js';

it(
  "overlap 'coalesce': each slot runs or is stood for by a later run that counts it",
  { timeout: 90_000 },
  async () => {
    const db = await createTestDatabase();
    const store = new MemoryLeaseStore();
    const namespace = `ovc${randomUUID().slice(0, 8)}`;
    const seen = new Map<string, { count: number; until: number } | null>();
    const spans: { from: number; to: number }[] = [];
    const job = defineJob({
      name: 'sync',
      schedule: '* * * * * *',
      overlap: 'coalesce',
      handler: async (ctx) => {
        const from = Date.now();
        seen.set(
          ctx.runId,
          ctx.coalesced ? { count: ctx.coalesced.count, until: ctx.coalesced.until.getTime() } : null,
        );
        await sleep(2500);
        spans.push({ from, to: Date.now() });
      },
    });
    const replicas = ['ovc-a', 'ovc-b'].map(
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
          shutdownGraceMs: 4000,
          logger: pino({ level: 'silent' }),
        }),
    );
    try {
      for (const r of replicas) await r.start();
      await sleep(10_000);
      // Stop firing, let the last waiting run finish.
      const leader = replicas.find((r) => r.role === 'leader')!;
      await leader.pause('sync', { reason: 'end of the test', by: 'test', until: null });
      const deadline = Date.now() + 20_000;
      while (Date.now() < deadline) {
        const open = await db.pool.query(
          "SELECT 1 FROM cw_runs WHERE job = 'sync' AND state IN ('pending', 'running', 'retrying')",
        );
        if (open.rowCount === 0) break;
        await sleep(200);
      }
      const runs = (
        await db.pool.query<{ id: string; at: Date; state: string; error: string | null; coalesced: number }>(
          "SELECT id, scheduled_at AS at, state, error, coalesced FROM cw_runs WHERE job = 'sync' ORDER BY scheduled_at",
        )
      ).rows.filter((r) => !(r.error ?? '').startsWith('job is paused'));
      const ran = runs.filter((r) => r.state === 'completed');
      const stoodFor = runs.filter((r) => r.state === 'skipped');
      assert.equal(ran.length + stoodFor.length, runs.length, 'every slot ran or was stood for');
      assert.ok(ran.length >= 3 && stoodFor.length >= 3, `${ran.length} ran, ${stoodFor.length} stood for`);
      for (const s of stoodFor) {
        const m = /^overlap "coalesce": run (\d+) stands for it$/.exec(s.error ?? '');
        assert.ok(m, `slot ${s.at.toISOString()}: ${s.error}`);
        const standing = runs.find((r) => r.id === m[1]);
        assert.equal(standing?.state, 'completed', 'the run standing for it ran');
        assert.ok(standing.at < s.at, 'an older slot stands for a newer one');
      }
      for (const r of ran) {
        const counted = stoodFor.filter((s) => s.error!.includes(`run ${r.id} `));
        assert.equal(r.coalesced, counted.length, `run ${r.id} counts the slots it stood for`);
        const ctx = seen.get(r.id);
        if (counted.length > 0) {
          // Its handler saw the slots counted by the time it was claimed (later ones may have come after).
          assert.ok(ctx && ctx.count >= 1 && ctx.count <= counted.length, `ctx.coalesced of run ${r.id}`);
        }
      }
      spans.sort((a, b) => a.from - b.from);
      for (let i = 1; i < spans.length; i++) assert.ok(spans[i]!.from >= spans[i - 1]!.to, 'no two handlers at once');
    } finally {
      for (const r of replicas) await r.stop();
      await db.drop();
    }
  },
);
