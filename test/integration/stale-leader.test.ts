/**
 * A stale leader: its renewals stopped (frozen) past the TTL, another replica leads with a higher
 * token, and the stale one, still believing it leads, keeps firing. Every one of its fires must be
 * refused by the fence (not by luck), and none may reach BullMQ or a handler.
 */
import { after, before, it } from 'node:test';
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { setTimeout as sleep } from 'node:timers/promises';
import { Redis } from 'ioredis';
import { pino } from 'pino';
import { systemClock } from '../../src/clock.js';
import { defineJob } from '../../src/jobs/define-job.js';
import { JobRegistry } from '../../src/jobs/job-registry.js';
import { BullmqDelivery } from '../../src/jobs/bullmq-delivery.js';
import { MemoryLeaseBackend, MemoryLeaseStore } from '../../src/locks/memory.js';
import { FireLoop, type Leadership } from '../../src/scheduler/firing/fire-loop.js';
import { Ledger } from '../../src/ledger/ledger.js';
import { createTestDatabase, type TestDatabase } from '../support/postgres-database.js';
import { SHARED_REDIS_URL } from './failover-scenario.js';

let db: TestDatabase;
let redis: Redis;
before(async () => {
  db = await createTestDatabase();
  redis = new Redis(SHARED_REDIS_URL);
});
after(async () => {
  await redis.quit();
  await db.drop();
});

it(
  'a leader frozen past its TTL keeps firing: every fire refused by the fence, none delivered',
  { timeout: 60_000 },
  async () => {
    const store = new MemoryLeaseStore();
    const backend = new MemoryLeaseBackend({ store });
    const registry = new JobRegistry([defineJob({ name: 'tick', schedule: '* * * * * *', handler: () => {} })]);
    const ledger = new Ledger(db.pool);
    const namespace = `stale${randomUUID().slice(0, 8)}`;
    const delivery = new BullmqDelivery({ connection: redis, namespace, registry, ledger });
    const logger = pino({ level: 'silent' });
    const ttlMs = 1500;

    // Leadership as a frozen process sees it: the lease it last had, forever valid.
    const staleLease = (await backend.tryAcquire({ name: 'sched', holder: 'stale', ttlMs }))!;
    const stepDowns: string[] = [];
    const frozen: Leadership = { lease: () => staleLease, stepDown: (why) => stepDowns.push(why) };
    const make = (leadership: Leadership, id: string) =>
      new FireLoop({
        registry,
        ledger: ledger.fires,
        delivery,
        leadership,
        clock: systemClock,
        logger,
        replicaId: id,
        fenceResource: 'scheduler/sched',
      });
    const staleLoop = make(frozen, 'stale');
    const refusals: bigint[] = [];
    staleLoop.on('fire:refused', (err) => refusals.push(err.token));
    const staleAbort = new AbortController();
    await staleLoop.lead(staleAbort.signal);
    await sleep(2500);
    const before = await db.pool.query<{ n: number }>(
      `SELECT count(*)::int AS n FROM cw_runs WHERE leader_id = 'stale'`,
    );
    assert.ok(before.rows[0]!.n >= 1, 'the leader fired while its lease was valid');

    // Its renewals are frozen: the lease expires and a new leader takes it with a higher token.
    await sleep(ttlMs + 200);
    const fresh = (await backend.tryAcquire({ name: 'sched', holder: 'fresh', ttlMs: 60_000 }))!;
    assert.ok(fresh.token > staleLease.token);
    const freshLoop = make({ lease: () => fresh, stepDown: () => {} }, 'fresh');
    const freshAbort = new AbortController();
    await freshLoop.lead(freshAbort.signal);
    const freshStartedAt = new Date();
    await sleep(4000);
    staleAbort.abort();
    freshAbort.abort();
    staleLoop.stop();
    freshLoop.stop();

    assert.ok(
      refusals.length >= 3,
      `the stale leader kept firing and was refused each time (refusals: ${refusals.length})`,
    );
    assert.ok(refusals.every((t) => t === staleLease.token));
    assert.ok(stepDowns.length >= 3 && stepDowns.every((w) => /fence refused/.test(w)));
    const staleAfter = await db.pool.query<{ n: number }>(
      `SELECT count(*)::int AS n FROM cw_runs WHERE leader_token = $1 AND created_at >= $2`,
      [staleLease.token.toString(), freshStartedAt],
    );
    assert.equal(staleAfter.rows[0]!.n, 0, 'no fire of the stale leader committed after the new leader started');
    const freshRuns = await db.pool.query<{ id: string }>(`SELECT id FROM cw_runs WHERE leader_token = $1`, [
      fresh.token.toString(),
    ]);
    assert.ok(freshRuns.rows.length >= 3, 'the new leader fired');
    // What reached BullMQ is exactly the committed runs: a refused fire has no run and no job.
    const queued = await delivery.queue.getJobs(['waiting', 'delayed', 'active', 'completed', 'failed']);
    const committedIds = new Set((await db.pool.query<{ id: string }>('SELECT id FROM cw_runs')).rows.map((r) => r.id));
    assert.ok(queued.length >= freshRuns.rows.length);
    for (const job of queued) assert.ok(committedIds.has(job.data.runId), `BullMQ job ${job.id} has no committed run`);
    await delivery.queue.obliterate({ force: true });
    await delivery.close();
  },
);
