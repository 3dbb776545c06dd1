import { it } from 'node:test';
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { Redis } from 'ioredis';
import { defineJob } from '../../src/jobs/define-job.js';
import { JobRegistry } from '../../src/jobs/job-registry.js';
import { BullmqDelivery } from '../../src/jobs/bullmq-delivery.js';
import { Ledger } from '../../src/ledger/ledger.js';
import { createTestDatabase } from '../support/postgres-database.js';
import { SHARED_REDIS_URL } from './failover-scenario.js';

it(
  "a new ledger on the same Redis: its runs are delivered, not swallowed by the old ledger's job ids",
  { timeout: 30_000 },
  async () => {
    const [oldDb, newDb] = [await createTestDatabase(), await createTestDatabase()];
    const redis = new Redis(SHARED_REDIS_URL);
    const namespace = `dl${randomUUID().slice(0, 8)}`;
    const registry = new JobRegistry([defineJob({ name: 'j', schedule: '* * * * * *', handler: () => {} })]);
    const leader = { fenceResource: 'scheduler/x', token: 1n, replicaId: 'r', stillLeading: () => true };
    const deliveries: BullmqDelivery[] = [];
    try {
      for (const db of [oldDb, newDb]) {
        const ledger = new Ledger(db.pool);
        const delivery = new BullmqDelivery({ connection: redis, namespace, registry, ledger });
        deliveries.push(delivery);
        const { committed } = await ledger.fires.commitFires(
          [{ job: 'j', scheduledAt: new Date(), trigger: 'manual' }],
          leader,
        );
        assert.equal(committed[0]!.runId, 1n, 'both ledgers number their first run 1');
        await delivery.enqueue(committed);
        await delivery.enqueue(committed); // a second enqueue of the same run is still a no-op
      }
      const jobs = await deliveries[0]!.queue.getJobs(['waiting', 'delayed']);
      assert.equal(jobs.length, 2, `expected one job per ledger, found ${jobs.map((j) => j.id).join(', ')}`);
      assert.notEqual(await new Ledger(oldDb.pool).identity(), await new Ledger(newDb.pool).identity());
    } finally {
      await deliveries[0]?.queue.obliterate({ force: true }).catch(() => {});
      for (const d of deliveries) await d.close();
      await redis.quit();
      await oldDb.drop();
      await newDb.drop();
    }
  },
);
