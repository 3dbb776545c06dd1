/**
 * A replica campaigns early in its start-up (before its worker and admin HTTP), so a start-up that
 * fails after that must not leave it holding the lease: here the admin port is taken, start()
 * rejects, and by then the lease it had won is released for the others. And `cronwarden start` on
 * a taken port (a second replica on one host) exits 2, not the retryable 1, naming the setting.
 */
import { after, before, it } from 'node:test';
import assert from 'node:assert/strict';
import { createServer, type Server } from 'node:net';
import { once } from 'node:events';
import { pino } from 'pino';
import { spawn } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { InvalidConfigError } from '../../src/errors.js';
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
  // A taken port is configuration (issue 25 #14): it names the option to change.
  await assert.rejects(replica.start(), (err: Error) => {
    assert.ok(err instanceof InvalidConfigError, String(err));
    assert.equal(err.setting, 'admin.port');
    assert.ok(err.message.includes(`127.0.0.1:${port} is already in use`), err.message);
    return true;
  });
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

it('cronwarden start on a taken admin port (or probe port) exits 2 with one line naming the setting', async () => {
  const port = (taken.address() as { port: number }).port;
  const start = (env: Record<string, string>) =>
    new Promise<{ code: number | null; stderr: string }>((resolve) => {
      const child = spawn(process.execPath, ['bin/cronwarden.js', 'start'], {
        cwd: fileURLToPath(new URL('../..', import.meta.url)),
        env: {
          ...process.env,
          CRONWARDEN_BACKEND: 'memory',
          CRONWARDEN_JOBS: 'test/admin/fixtures/jobs.ts',
          CRONWARDEN_DATABASE_URL: db.url,
          CRONWARDEN_SCHEMA: db.schema,
          CRONWARDEN_REDIS_URL: SHARED_REDIS_URL,
          CRONWARDEN_LOG_LEVEL: 'silent',
          ...env,
        },
      });
      let stderr = '';
      child.stderr.on('data', (d: Buffer) => (stderr += d.toString()));
      const timer = setTimeout(() => child.kill('SIGKILL'), 30_000);
      child.on('exit', (code) => {
        clearTimeout(timer);
        resolve({ code, stderr });
      });
    });
  const admin = await start({ CRONWARDEN_ADMIN_PORT: String(port) });
  assert.equal(
    admin.stderr,
    `cronwarden: CRONWARDEN_ADMIN_PORT (--admin-port): 127.0.0.1:${port} is already in use (another replica on this host?): give each replica its own port, or 0 for any free one\n`,
  );
  assert.equal(admin.code, 2, 'a configuration error: a supervisor must not restart it in a loop');
  const probe = await start({ CRONWARDEN_ADMIN_PORT: '0', CRONWARDEN_PROBE_PORT: String(port) });
  assert.match(probe.stderr, /^cronwarden: CRONWARDEN_PROBE_PORT \(--probe-port\): 127\.0\.0\.1:\d+ is already in use/);
  assert.equal(probe.code, 2);
});
