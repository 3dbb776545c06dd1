/**
 * The Replica of a namespace as a reader would first write it: the PostgreSQL lease backend made
 * without a `schema` (issue 25 #13). It used to look for cw_leases in schema "cronwarden" while the
 * ledger was in "cronwarden_<namespace>": one warning, "replica started", and it never led. Now
 * start-up stops with an error naming both schemas, and a backend given the namespace (or the
 * schema, as docs/guides/sharing-a-database.md does) derives the ledger's schema and leads.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { once } from 'node:events';
import { Redis } from 'ioredis';
import { pino } from 'pino';
import { Replica } from '../../src/replica/replica.js';
import { defineJob } from '../../src/jobs/define-job.js';
import { createLeaseBackend, type BackendConfig } from '../../src/locks/create-backend.js';
import { migrateDatabase } from '../../src/db/migrate.js';
import { InvalidConfigError } from '../../src/errors.js';
import { createTestDatabase, type TestDatabase } from '../support/postgres-database.js';
import { REDIS_URL, namespaceKeys } from './run-sample.js';

describe('a Replica in a namespace with the PostgreSQL lease backend', () => {
  let db: TestDatabase;
  let schema = '';
  const namespace = `docs-ns-${randomBytes(4).toString('hex')}`;
  const redis = new Redis(REDIS_URL, { maxRetriesPerRequest: 2 });

  before(async () => {
    db = await createTestDatabase({ migrate: false });
    ({ schema } = await migrateDatabase(db.url, { namespace }));
  });
  after(async () => {
    const keys = await namespaceKeys(redis, namespace);
    if (keys.length > 0) await redis.del(...keys);
    redis.disconnect();
    await db.drop();
  });

  const replicaWith = async (config: Omit<Extract<BackendConfig, { kind: 'postgres' }>, 'kind' | 'url'>) => {
    const backend = await createLeaseBackend({ kind: 'postgres', url: db.url, ...config });
    const replica = new Replica({
      namespace,
      backend,
      databaseUrl: db.url,
      redisUrl: REDIS_URL,
      jobs: [defineJob({ name: 'tick', schedule: '* * * * * *', handler: () => undefined })],
      logger: pino({ level: 'silent' }),
    });
    return replica;
  };

  it("made without a schema: start-up stops, naming the schema it looked in and the ledger's", async () => {
    const replica = await replicaWith({});
    try {
      await assert.rejects(replica.start(), (err: Error) => {
        assert.ok(err instanceof InvalidConfigError, String(err));
        assert.match(err.message, /no cw_leases table in schema "cronwarden"/);
        assert.ok(err.message.includes(`ledger is in schema "${schema}"`), err.message);
        return true;
      });
      assert.equal(replica.role, 'stopped', 'it never campaigned');
    } finally {
      await replica.stop();
    }
  });

  it("given the namespace, the backend derives the ledger's schema and the replica leads", async () => {
    const replica = await replicaWith({ namespace });
    try {
      const leading = once(replica, 'lease:acquired', { signal: AbortSignal.timeout(8000) });
      await replica.start();
      await leading;
      assert.equal(replica.role, 'leader');
    } finally {
      await replica.stop();
    }
  });
});
