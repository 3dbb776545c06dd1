/**
 * The admin HTTP served from a worker thread (issue 12's flood): the same API over the replica's
 * view posted by message, mutations forwarded to the main thread, and /healthz that still fails
 * when the main thread's event loop is wedged (its heartbeat goes stale), though the admin thread
 * itself answers. One in-process replica (memory lease, real PostgreSQL, real Redis).
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { pino } from 'pino';
import { AdminThread } from '../../src/admin/admin-thread.js';
import { defineJob } from '../../src/jobs/define-job.js';
import { MemoryLeaseBackend } from '../../src/locks/memory.js';
import { Replica } from '../../src/replica/replica.js';
import { createTestDatabase, type TestDatabase } from '../support/postgres-database.js';
import { ADMIN_TOKEN, SHARED_REDIS_URL, json, waitForRole } from './support.js';

let db: TestDatabase;
let replica: Replica;
let backend: MemoryLeaseBackend;
let admin: AdminThread;
let url: string;

before(async () => {
  db = await createTestDatabase();
  backend = new MemoryLeaseBackend();
  replica = new Replica({
    replicaId: 'thread-a',
    namespace: `thr${Date.now().toString(36)}`,
    schema: db.schema,
    backend,
    databaseUrl: db.url,
    redisUrl: SHARED_REDIS_URL,
    jobs: [defineJob({ name: 'yearly', schedule: '0 0 1 1 *', handler: async () => {} })],
    election: { ttlMs: 3000 },
    worker: { enabled: false },
    retentionMs: 0,
    admin: false,
    logger: pino({ level: 'silent' }),
  });
  await replica.start();
  await waitForRole(replica, 'leader');
  admin = new AdminThread({
    replica,
    backend,
    databaseUrl: db.url,
    token: ADMIN_TOKEN,
    port: 0,
    stallLimitMs: 1000,
  });
  url = await admin.listen();
});
after(async () => {
  await admin?.close();
  await replica?.stop();
  await db?.drop();
});

/** GET `path` from another process after `delayMs`: it runs while this thread is blocked. */
function fetchFromChild(path: string, delayMs: number): Promise<{ status: number; body: Record<string, unknown> }> {
  const code = `setTimeout(async () => { const r = await fetch(${JSON.stringify(url + path)}); console.log(JSON.stringify({ status: r.status, body: await r.json() })); }, ${delayMs});`;
  const child = spawn(process.execPath, ['-e', code], { stdio: ['ignore', 'pipe', 'inherit'] });
  let out = '';
  child.stdout.on('data', (d: Buffer) => (out += d.toString()));
  return new Promise((resolve, reject) =>
    child.once('exit', () => {
      try {
        resolve(JSON.parse(out) as { status: number; body: Record<string, unknown> });
      } catch {
        reject(new Error(`the child printed ${JSON.stringify(out)}`));
      }
    }),
  );
}

describe('admin HTTP in a worker thread', () => {
  it('serves the replica as it is: role and lease on /healthz and /api/lease, jobs with their next fire', async () => {
    assert.deepEqual(await json(await fetch(`${url}/healthz`)), { ok: true, role: 'leader', replicaId: 'thread-a' });
    const lease = await json(await fetch(`${url}/api/lease`));
    assert.equal(lease.holder, 'thread-a');
    assert.equal(lease.role, 'leader');
    assert.equal(lease.token, replica.lease()!.token.toString());
    const jobs = await json(await fetch(`${url}/api/jobs`));
    assert.equal(jobs.jobs[0].name, 'yearly');
    assert.match(jobs.jobs[0].nextFireAt, /^\d{4}-01-01T00:00:00\.000Z$/);
    const metrics = await (await fetch(`${url}/metrics`)).text();
    assert.match(metrics, /cronwarden_is_leader\{[^}]*\} 1/);
  });

  it('mutations are forwarded to the main thread: pause, trigger, and a 401 without the token', async () => {
    const post = (path: string, token?: string) =>
      fetch(`${url}${path}`, { method: 'POST', headers: token ? { authorization: `Bearer ${token}` } : {} });
    assert.equal((await post('/api/jobs/yearly/pause')).status, 401);
    const paused = await json(await post('/api/jobs/yearly/pause', ADMIN_TOKEN));
    assert.deepEqual([paused.job, paused.paused, paused.pausedBy], ['yearly', true, 'admin']);
    assert.equal((await replica.ledger.fires.pausedJobs()).has('yearly'), true);
    await post('/api/jobs/yearly/resume', ADMIN_TOKEN);
    const fired = await json(await post('/api/jobs/yearly/trigger', ADMIN_TOKEN));
    assert.equal(fired.triggered, true);
    const run = await db.pool.query<{ trigger: string }>('SELECT trigger FROM cw_runs WHERE id = $1', [fired.runId]);
    assert.equal(run.rows[0]?.trigger, 'manual');
  });

  it('/healthz fails while the main thread is wedged, though the admin thread answers, and recovers', async () => {
    const during = fetchFromChild('/healthz', 2500);
    // Block this (the scheduler's) thread for 4 s: no timer, no heartbeat, no I/O.
    Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, 4000);
    const answer = await during;
    assert.equal(answer.status, 503);
    assert.match(String(answer.body.error), /scheduler's event loop has not answered for \d+ ms/);
    // The heartbeat resumes with the loop.
    await new Promise((r) => setTimeout(r, 600));
    assert.equal((await fetch(`${url}/healthz`)).status, 200);
  });
});
