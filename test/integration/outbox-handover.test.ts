import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { Redis } from 'ioredis';
import { pino } from 'pino';
import { defineJob } from '../../src/jobs/define-job.js';
import { JobRegistry } from '../../src/jobs/job-registry.js';
import { BullmqDelivery } from '../../src/jobs/bullmq-delivery.js';
import { Ledger } from '../../src/ledger/ledger.js';
import { FireLoop, type FireLoopOptions } from '../../src/scheduler/firing/fire-loop.js';
import type { DeliverableRun } from '../../src/scheduler/firing/run-delivery.js';
import type { Lease } from '../../src/locks/lease.js';
import { ManualClock } from '../support/manual-clock.js';
import { createTestDatabase } from '../support/postgres-database.js';
import { SHARED_REDIS_URL } from './failover-scenario.js';

/** A ledger, BullMQ and the fire loops of `jobs` jobs due every second, on a driven clock. */
async function harness(jobs: number, prefix: string) {
  const db = await createTestDatabase();
  const redis = new Redis(SHARED_REDIS_URL, { maxRetriesPerRequest: null });
  const registry = new JobRegistry(
    Array.from({ length: jobs }, (_, i) =>
      defineJob({ name: `${prefix}${i}`, schedule: '* * * * * *', handler: () => {} }),
    ),
  );
  const ledger = new Ledger(db.pool);
  const real = new BullmqDelivery({
    connection: redis,
    namespace: `${prefix}${randomUUID().slice(0, 8)}`,
    registry,
    ledger,
  });
  const clock = new ManualClock(Date.UTC(2026, 0, 1) - 500);
  // The real delivery, counting how often each run is handed to BullMQ.
  const handed = new Map<bigint, number>();
  const counted: FireLoopOptions['delivery'] = {
    enqueue: async (runs: DeliverableRun[]) => {
      for (const r of runs) handed.set(r.runId, (handed.get(r.runId) ?? 0) + 1);
      await real.enqueue(runs);
    },
    cancel: (ids: bigint[]) => real.cancel(ids),
  };
  /** The fire loop of a leader holding `token`; the outbox is swept by hand. */
  const leader = (token: bigint, delivery = counted) => {
    const lease: Lease = {
      name: 'l',
      holder: `r${token}`,
      token,
      ttlMs: 10_000,
      safetyMarginMs: 1000,
      deadline: Infinity,
    };
    return new FireLoop({
      registry,
      ledger: ledger.fires,
      delivery,
      leadership: { lease: () => lease, stepDown: () => {} },
      clock,
      logger: pino({ level: 'silent' }),
      replicaId: `r${token}`,
      fenceResource: 'scheduler/test',
      outboxIntervalMs: 3_600_000,
    });
  };
  const close = async () => {
    await real.queue.obliterate({ force: true }).catch(() => {});
    await real.close();
    await redis.quit();
    await db.drop();
  };
  return { db, ledger, real, clock, handed, leader, close };
}

describe('outbox and fire path (real PostgreSQL and BullMQ)', () => {
  it('the outbox never re-enqueues a run the fire path is handing over: 1,500 due per tick, sweeping all along', async () => {
    const jobs = 1500;
    const ticks = 3;
    const h = await harness(jobs, 'j');
    const loop = h.leader(1n);
    const tenure = new AbortController();
    let sweeping = true;
    let sweeps = 0;
    let swept = 0;
    try {
      await loop.lead(tenure.signal);
      const sweeper = (async () => {
        while (sweeping) {
          swept += await loop.sweepOutbox();
          sweeps++;
          await new Promise((r) => setImmediate(r));
        }
      })();
      for (let t = 0; t < ticks; t++) {
        await h.clock.advance(1000);
        await loop.tick();
      }
      sweeping = false;
      await sweeper;
      assert.ok(sweeps >= ticks, `the outbox swept while the fire path handed over (${sweeps} sweeps)`);
      assert.equal(h.handed.size, jobs * ticks, 'every fire was handed to BullMQ');
      const twice = [...h.handed].filter(([, n]) => n > 1).length;
      assert.equal(twice, 0, `${twice} runs were handed to BullMQ more than once`);
      assert.equal(swept, 0, 'the outbox re-enqueued nothing');
      const left = await h.ledger.fires.unenqueued(10, []);
      assert.deepEqual(left, [], 'no committed run is left unenqueued');
    } finally {
      sweeping = false;
      tenure.abort();
      await h.close();
    }
  });

  it('a leader that dies between its commit and the hand-over: the next leader hands each run over once', async () => {
    const jobs = 50;
    const h = await harness(jobs, 'k');
    // The first leader commits, then freezes in addBulk and is gone (kill -9): its hand-over never ends.
    const frozen = h.leader(1n, { enqueue: () => new Promise<void>(() => {}), cancel: async () => {} });
    const second = h.leader(2n);
    const first = new AbortController();
    const next = new AbortController();
    const count = async (sql: string) => (await h.db.pool.query<{ n: number }>(sql)).rows[0]!.n;
    try {
      await frozen.lead(first.signal);
      await h.clock.advance(1000);
      void frozen.tick();
      for (let i = 0; i < 200 && (await count('SELECT count(*)::int AS n FROM cw_runs')) < jobs; i++)
        await new Promise((r) => setTimeout(r, 10));
      assert.equal(
        await count('SELECT count(*)::int AS n FROM cw_hand_overs'),
        jobs,
        'committed, hand-over unconfirmed',
      );
      first.abort();
      await second.lead(next.signal);
      assert.equal(await second.sweepOutbox(), jobs, "the next leader's outbox hands the runs over");
      assert.equal(await second.sweepOutbox(), 0, 'and only once');
      assert.equal(h.handed.size, jobs);
      assert.deepEqual([...new Set(h.handed.values())], [1], 'each run handed over once');
      assert.equal(await count('SELECT count(*)::int AS n FROM cw_hand_overs'), 0, 'every hand-over confirmed');
      const queued = (await h.real.queue.getJobs(['waiting'])).flatMap((j) => j.data.runIds ?? [j.data.runId]);
      assert.deepEqual(queued.sort(), [...h.handed.keys()].map(String).sort(), 'BullMQ holds each run once');
    } finally {
      first.abort();
      next.abort();
      await h.close();
    }
  });
});
