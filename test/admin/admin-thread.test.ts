/**
 * The admin HTTP served from a worker thread (issue 12's flood): the same API over the replica's
 * view posted by message, mutations forwarded to the main thread, and /healthz that still fails
 * when the main thread's event loop is wedged (its heartbeat goes stale), though the admin thread
 * itself answers; the admin thread's lower CPU priority, read back from /proc. One in-process
 * replica (memory lease, real PostgreSQL, real Redis).
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { readdirSync, readFileSync } from 'node:fs';
import { pino } from 'pino';
import { AdminThread, DEFAULT_NICENESS } from '../../src/admin/admin-thread.js';
import { InvalidConfigError } from '../../src/errors.js';
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
/** The scheduler's (this) thread's nice value before any admin thread started. */
let mainNice: number | undefined;

/** A thread's nice value as the kernel has it: field 19 of /proc/<pid>/task/<tid>/stat. */
function niceOf(tid: number): number {
  const stat = readFileSync(`/proc/${process.pid}/task/${tid}/stat`, 'utf8');
  // Field 2 (the name) may hold spaces and parentheses: field 3 starts after the last ')'.
  return Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[19 - 3]);
}
const threadIds = () => readdirSync(`/proc/${process.pid}/task`).map(Number);
const linux = process.platform === 'linux';

before(async () => {
  if (linux) mainNice = niceOf(process.pid);
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

describe(
  "the admin thread's CPU priority",
  { skip: !linux && 'threads have their own nice value on Linux only' },
  () => {
    it('the admin thread alone runs at the niceness added to the process priority; the scheduler keeps it', () => {
      const priority = admin.priority;
      assert.ok(priority && 'tid' in priority, `not lowered: ${JSON.stringify(priority)}`);
      assert.ok(threadIds().includes(priority.tid), 'a thread of this process');
      assert.notEqual(priority.tid, process.pid, 'not the main thread');
      const expected = Math.min(19, mainNice! + DEFAULT_NICENESS);
      assert.equal(niceOf(priority.tid), expected);
      assert.equal(priority.nice, expected);
      // The main thread, and the threads it made (libuv's pool, V8's), keep the process's priority.
      for (const tid of threadIds().filter((t) => t !== priority.tid))
        assert.equal(niceOf(tid), mainNice, `thread ${tid}`);
    });

    it('niceness 0 leaves the thread at the process priority; out of range is refused before a thread starts', async () => {
      const before = new Set(threadIds());
      const plain = new AdminThread({ replica, backend, databaseUrl: db.url, port: 0, niceness: 0 });
      try {
        await plain.listen();
        assert.equal(plain.priority, undefined);
        const started = threadIds().filter((t) => !before.has(t));
        assert.ok(started.length > 0, 'the new admin thread is listed');
        for (const tid of started) assert.equal(niceOf(tid), mainNice, `thread ${tid}`);
      } finally {
        await plain.close();
      }
      assert.throws(
        () => new AdminThread({ replica, backend, databaseUrl: db.url, port: 0, niceness: 20 }),
        (err: unknown) => err instanceof InvalidConfigError && /from 0 to 19/.test(err.message),
      );
    });
  },
);
