/**
 * The scheduler has connections of its own. An application that shares its pool with cronwarden
 * (handlers' own queries waiting on a lock, a slow report) can take every connection of that pool;
 * the leader must keep firing into the ledger and the replica keep beating all the same.
 */
import { it } from 'node:test';
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { setTimeout as sleep } from 'node:timers/promises';
import pg from 'pg';
import { pino } from 'pino';
import { defineJob } from '../../src/jobs/define-job.js';
import { MemoryLeaseBackend, MemoryLeaseStore } from '../../src/locks/memory.js';
import { Replica } from '../../src/replica/replica.js';
import { createTestDatabase } from '../support/postgres-database.js';
import { SHARED_REDIS_URL } from './failover-scenario.js';

it(
  'every connection of the pool the replica was given taken by the application: the schedule still fires',
  { timeout: 60_000 },
  async () => {
    const db = await createTestDatabase();
    const appPool = new pg.Pool({ connectionString: db.url, max: 5, connectionTimeoutMillis: 3000 });
    const replica = new Replica({
      replicaId: 'shared-pool',
      namespace: `scp${randomUUID().slice(0, 8)}`,
      schema: db.schema,
      backend: new MemoryLeaseBackend({ store: new MemoryLeaseStore() }),
      pool: appPool,
      redisUrl: SHARED_REDIS_URL,
      jobs: [defineJob({ name: 'tick', schedule: '* * * * * *', handler: async () => undefined })],
      shutdownGraceMs: 500,
      logger: pino({ level: 'silent' }),
    });
    const taken: pg.PoolClient[] = [];
    try {
      await replica.start();
      await sleep(2000);
      // The application takes its whole pool (five clients) and keeps it.
      for (let i = 0; i < 5; i++) taken.push(await appPool.connect());
      const from = new Date();
      const beatBefore = await lastSeen(db.pool, db.schema);
      await sleep(5000);
      const to = new Date();
      const ticks = await db.pool.query<{ n: number }>(
        `SELECT count(*)::int AS n FROM ${db.schema}.cw_runs WHERE job = 'tick' AND created_at > $1 AND created_at <= $2`,
        [from, to],
      );
      assert.ok(ticks.rows[0]!.n >= 4, `fires committed while the pool was taken: ${ticks.rows[0]!.n} in 5 s`);
      assert.ok((await lastSeen(db.pool, db.schema)) > beatBefore, 'the replica beat while the pool was taken');
    } finally {
      for (const c of taken) c.release();
      await replica.stop();
      await appPool.end();
      await db.drop();
    }
  },
);

async function lastSeen(pool: pg.Pool, schema: string): Promise<number> {
  const r = await pool.query<{ t: Date }>(
    `SELECT last_seen AS t FROM ${schema}.cw_members WHERE replica_id = 'shared-pool'`,
  );
  return r.rows[0]!.t.getTime();
}
