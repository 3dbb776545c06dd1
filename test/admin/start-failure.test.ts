/**
 * A replica campaigns early in its start-up (before its worker and admin HTTP), so a start-up that
 * fails after that must not leave it holding the lease: here the admin port is taken, start()
 * rejects, and by then the lease it had won is released for the others.
 */
import { after, before, it } from 'node:test';
import assert from 'node:assert/strict';
import { createServer, type Server } from 'node:net';
import { once } from 'node:events';
import { pino } from 'pino';
import { MemoryLeaseBackend, MemoryLeaseStore } from '../../src/locks/memory.js';
import { Replica } from '../../src/replica/replica.js';
import { createTestDatabase, type TestDatabase } from '../support/postgres-database.js';
import { SHARED_REDIS_URL, testJobs } from './support.js';

let db: TestDatabase;
let taken: Server;
before(async () => {
  db = await createTestDatabase();
  taken = createServer().listen(0, '127.0.0.1');
  await once(taken, 'listening');
});
after(async () => {
  taken.close();
  await db.drop();
});

it('a start-up that fails after the campaign began ends it: no lease is left held', async () => {
  const store = new MemoryLeaseStore();
  let campaigns = 0;
  // Counts campaigns: the one that began before the failure must not end holding the lease.
  const backend = new (class extends MemoryLeaseBackend {
    override acquire(...a: Parameters<MemoryLeaseBackend['acquire']>) {
      campaigns++;
      return super.acquire(...a);
    }
  })({ store });
  const port = (taken.address() as { port: number }).port;
  const replica = new Replica({
    replicaId: 'early',
    schema: db.schema,
    backend,
    databaseUrl: db.url,
    redisUrl: SHARED_REDIS_URL,
    jobs: testJobs(),
    election: { ttlMs: 3000 },
    admin: { port, thread: false },
    logger: pino({ level: 'silent' }),
  });
  await assert.rejects(replica.start(), /EADDRINUSE/);
  assert.ok(
    campaigns >= 1,
    'the campaign began before the admin HTTP failed to listen (else this test proves nothing)',
  );
  // Long enough for a campaign left running to win the free lease.
  await new Promise((r) => setTimeout(r, 300));
  const observer = new MemoryLeaseBackend({ store });
  assert.equal(await observer.current(replica.leaseName), null, 'the lease was released');
  assert.equal(replica.role, 'stopped');
  await replica.stop();
});
