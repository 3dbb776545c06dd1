/**
 * The admin API under hostile input and load (issue 12): reads never take the ledger pool the
 * scheduler uses, a read cap answers 503 + Retry-After, idle sockets are closed, bad cursors are
 * 400, database text never reaches a response and is logged once per kind, handler text is served
 * bounded, only known Host names are answered, cross-origin mutations are refused, and the page
 * carries a strict Content-Security-Policy. One in-process replica (memory lease, real PostgreSQL).
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import { request } from 'node:http';
import { connect } from 'node:net';
import { Writable } from 'node:stream';
import { pino } from 'pino';
import pg from 'pg';
import { AdminServer, type AdminServerOptions } from '../../src/admin/server.js';
import { loadReplicaConfig } from '../../src/config/replica-config.js';
import { storedError } from '../../src/ledger/stored-text.js';
import { defineJob } from '../../src/jobs/define-job.js';
import { MemoryLeaseBackend } from '../../src/locks/memory.js';
import { Replica } from '../../src/replica/replica.js';
import { createTestDatabase, type TestDatabase } from '../support/postgres-database.js';
import { ADMIN_TOKEN, SHARED_REDIS_URL, waitForRole } from './support.js';

let db: TestDatabase;
let replica: Replica;
let backend: MemoryLeaseBackend;
const logLines: { level: number; msg: string; suppressedSinceLast?: number }[] = [];
const servers: AdminServer[] = [];

before(async () => {
  db = await createTestDatabase();
  backend = new MemoryLeaseBackend();
  const sink = new Writable({
    write(chunk: Buffer, _enc, done) {
      for (const line of chunk.toString().split('\n')) if (line) logLines.push(JSON.parse(line));
      done();
    },
  });
  // Only a yearly job and no worker: nothing but the admin reads touches cw_runs during the tests.
  replica = new Replica({
    replicaId: 'hard-a',
    namespace: `hard${Date.now().toString(36)}`,
    schema: db.schema,
    backend,
    databaseUrl: db.url,
    redisUrl: SHARED_REDIS_URL,
    jobs: [defineJob({ name: 'yearly', schedule: '0 0 1 1 *', handler: async () => {} })],
    election: { ttlMs: 3000 },
    worker: { enabled: false },
    retentionMs: 0,
    logger: pino({ level: 'info' }, sink),
  });
  await replica.start();
  await waitForRole(replica, 'leader');
});
after(async () => {
  for (const s of servers) await s.close();
  await replica.stop();
  await db.drop();
});

async function serve(o: Partial<AdminServerOptions> = {}): Promise<{ admin: AdminServer; url: string; port: number }> {
  const admin = new AdminServer({ replica, backend, databaseUrl: db.url, token: ADMIN_TOKEN, port: 0, ...o });
  servers.push(admin);
  const url = await admin.listen();
  return { admin, url, port: Number(new URL(url).port) };
}

/** The settings `cronwarden start` cannot do without. */
const requiredEnv = {
  CRONWARDEN_BACKEND: 'postgres',
  CRONWARDEN_DATABASE_URL: 'postgres://app@127.0.0.1:5432/app',
  CRONWARDEN_REDIS_URL: 'redis://127.0.0.1:6379',
  CRONWARDEN_JOBS: 'jobs.js',
};

interface Answer {
  status: number;
  headers: Record<string, string | string[] | undefined>;
  body: string;
}

/** One HTTP request with full control of the headers (fetch does not let a caller set Host). */
function send(
  port: number,
  path: string,
  o: { method?: string; headers?: Record<string, string> } = {},
): Promise<Answer> {
  return new Promise((resolve, reject) => {
    const req = request({ host: '127.0.0.1', port, path, method: o.method ?? 'GET', headers: o.headers }, (res) => {
      const chunks: Buffer[] = [];
      res.on('data', (c: Buffer) => chunks.push(c));
      res.on('end', () =>
        resolve({ status: res.statusCode!, headers: res.headers, body: Buffer.concat(chunks).toString() }),
      );
    });
    req.on('error', reject);
    req.end();
  });
}

describe('the admin API cannot starve the scheduler', () => {
  it('with every admin read stuck in the database, the ledger pool and /healthz answer at once, and readers get 503 + Retry-After', async () => {
    const { url, port } = await serve({ maxConcurrentReads: 4, pool: { statementTimeoutMs: 1500 } });
    const locker = new pg.Client({ connectionString: db.url });
    await locker.connect();
    try {
      // Every read of cw_runs now waits: the shape of a flood of slow /api/runs.
      await locker.query('BEGIN');
      await locker.query(`LOCK TABLE ${replica.ledger.tables.runs} IN ACCESS EXCLUSIVE MODE`);
      // 24 different URLs: identical ones would share one read (the next test).
      const readers = Array.from({ length: 24 }, (_, i) => send(port, `/api/runs?limit=${400 + i}`));
      await new Promise((r) => setTimeout(r, 300)); // let them reach the database
      let t = performance.now();
      await replica.ledger.pool.query('SELECT 1');
      const ledgerMs = performance.now() - t;
      t = performance.now();
      const health = await fetch(`${url}/healthz`);
      const healthMs = performance.now() - t;
      const ready = await fetch(`${url}/readyz`);
      const admins = await locker.query<{ n: number }>(
        // This database's only: other tests' admin pools share the server.
        "SELECT count(*)::int AS n FROM pg_stat_activity WHERE application_name = 'cronwarden-admin' AND datname = current_database()",
      );
      const answers = await Promise.all(readers);
      assert.ok(ledgerMs < 500, `the ledger pool waited ${ledgerMs.toFixed(0)} ms behind admin reads`);
      assert.equal(health.status, 200);
      assert.ok(healthMs < 500, `/healthz took ${healthMs.toFixed(0)} ms`);
      assert.equal(ready.status, 200);
      assert.ok(admins.rows[0]!.n <= 3, `${admins.rows[0]!.n} admin connections`);
      const busy = answers.filter((a) => a.status === 503 && JSON.parse(a.body).code === 'busy');
      assert.ok(busy.length >= 20, `${busy.length} of 24 refused by the cap`);
      for (const a of answers.filter((x) => x.status === 503)) assert.equal(a.headers['retry-after'], '1');
      // The four admitted reads end at the statement timeout as 503, with no PostgreSQL text.
      const timedOut = answers.filter((a) => a.status === 503 && JSON.parse(a.body).code === 'unavailable');
      assert.equal(timedOut.length + busy.length, 24, JSON.stringify(answers.map((a) => a.status)));
      for (const a of timedOut) assert.doesNotMatch(a.body, /cancel|statement|timeout exceeded/i);
    } finally {
      await locker.query('ROLLBACK');
      await locker.end();
    }
    assert.equal((await fetch(`${url}/api/runs`)).status, 200);
  });

  it('requests of one URL share the read in flight: one query for 30 readers, all answered, none refused by the cap', async () => {
    const { port } = await serve({ maxConcurrentReads: 2 });
    const locker = new pg.Client({ connectionString: db.url });
    await locker.connect();
    let answers: Answer[];
    try {
      await locker.query('BEGIN');
      await locker.query(`LOCK TABLE ${replica.ledger.tables.runs} IN ACCESS EXCLUSIVE MODE`);
      const readers = Array.from({ length: 30 }, () => send(port, '/api/runs?limit=7'));
      const other = send(port, '/api/runs?limit=8'); // a second URL takes the second slot
      const third = send(port, '/api/runs?limit=9'); // and a third finds the cap full
      await new Promise((r) => setTimeout(r, 300)); // let them reach the database
      const waiting = await locker.query<{ n: number }>(
        "SELECT count(*)::int AS n FROM pg_stat_activity WHERE application_name = 'cronwarden-admin' AND datname = current_database() AND wait_event_type = 'Lock'",
      );
      assert.equal(waiting.rows[0]!.n, 2, 'one query per URL reached the database');
      await locker.query('ROLLBACK');
      answers = await Promise.all(readers);
      assert.equal((await other).status, 200);
      assert.equal((await third).status, 503, 'a third URL found both read slots taken');
    } finally {
      await locker.end();
    }
    assert.deepEqual(new Set(answers.map((a) => a.status)), new Set([200]));
    assert.equal(new Set(answers.map((a) => a.body)).size, 1, 'every reader got the one answer');
  });

  it('closes a socket that sends nothing, and closes connections beyond the cap at once', async () => {
    const { port: idlePort } = await serve({ idleTimeoutMs: 300 });
    // The cap's own server keeps idle sockets 20 s: a close well before that is the cap's, however
    // slow a loaded machine is to deliver it.
    const { port } = await serve({ idleTimeoutMs: 20_000, maxConnections: 2 });
    const closedWithin = (ms: number, to = port) =>
      new Promise<boolean>((resolve) => {
        const s = connect(to, '127.0.0.1');
        s.on('error', () => {});
        const timer = setTimeout(() => resolve(false), ms);
        s.on('close', () => {
          clearTimeout(timer);
          resolve(true);
        });
      });
    assert.equal(await closedWithin(3000, idlePort), true, 'an idle socket stayed open');
    const held = [connect(port, '127.0.0.1'), connect(port, '127.0.0.1')];
    for (const s of held) s.on('error', () => {});
    await Promise.all(held.map((s) => new Promise((r) => s.on('connect', r))));
    try {
      assert.equal(await closedWithin(5000), true, 'a third connection was kept beyond maxConnections 2');
    } finally {
      for (const s of held) s.destroy();
    }
  });
});

describe('bad input and failures answer without database text', () => {
  it('run id 9223372036854775808 is 400 naming id, and logs nothing', async () => {
    const { url } = await serve();
    const mark = logLines.length;
    for (let i = 0; i < 3; i++) {
      const res = await fetch(`${url}/api/runs/9223372036854775808`);
      assert.equal(res.status, 400);
      const body = (await res.json()) as { error: string; code: string };
      assert.equal(body.code, 'bad_request');
      assert.match(body.error, /^id: must be a run id \(at most 9223372036854775807\)$/);
    }
    assert.equal((await fetch(`${url}/api/runs/9223372036854775807`)).status, 404);
    assert.equal((await fetch(`${url}/api/runs?q=9223372036854775807`)).status, 200);
    assert.deepEqual(
      logLines.slice(mark).filter((l) => l.level >= 50),
      [],
    );
  });

  it('a failing query answers 500 without its text and is logged once per kind', async () => {
    const { url } = await serve();
    const mark = logLines.length;
    await db.pool.query('ALTER TABLE cw_elections RENAME TO cw_elections_away');
    try {
      for (let i = 0; i < 5; i++) {
        const res = await fetch(`${url}/api/elections`);
        assert.equal(res.status, 500);
        const text = await res.text();
        assert.doesNotMatch(text, /cw_elections|relation|does not exist/);
        assert.deepEqual(JSON.parse(text), { error: 'internal error (logged by the replica)', code: 'internal' });
      }
    } finally {
      await db.pool.query('ALTER TABLE cw_elections_away RENAME TO cw_elections');
    }
    const errors = logLines.slice(mark).filter((l) => l.level >= 50);
    assert.equal(errors.length, 1, JSON.stringify(errors));
    assert.equal(errors[0]!.msg, 'admin request failed');
  });

  it('serves handler error text bounded: ten 5 MB errors make a response of kilobytes, not 100 MB', async () => {
    const { url } = await serve();
    const big = 5_000_000;
    const runs = await db.pool.query<{ id: string }>(
      `INSERT INTO cw_runs (job, scheduled_at, trigger, leader_token, leader_id, state, error)
       SELECT 'yearly', now() - g * interval '1 day', 'manual', 1, 'hard-a', 'failed', repeat('e', $1) FROM generate_series(1, 10) g RETURNING id::text`,
      [big],
    );
    await db.pool.query(
      `INSERT INTO cw_run_attempts (run_id, attempt, token, worker, state, finished_at, error, error_stack)
       SELECT id, 1, 1, 'hard-a', 'failed', now(), repeat('a', $1), repeat('s', $1) FROM unnest($2::bigint[]) id`,
      [big, runs.rows.map((r) => r.id)],
    );
    try {
      const res = await fetch(`${url}/api/runs?limit=500`);
      assert.equal(res.status, 200);
      const text = await res.text();
      assert.ok(text.length < 100_000, `${text.length} characters served`);
      const body = JSON.parse(text) as { runs: { id: string; error: string | null }[] };
      const failed = body.runs.filter((r) => r.error?.startsWith('eee'));
      assert.equal(failed.length, 10);
      for (const r of failed) {
        assert.equal(r.error, `${'e'.repeat(2000)}… [${big - 2000} more characters not shown]`);
        const detail = await fetch(`${url}/api/runs/${r.id}`);
        const detailText = await detail.text();
        assert.ok(detailText.length < 10_000, `${detailText.length} characters served for one run`);
        const attempt = (JSON.parse(detailText) as { attempts: { error: string; errorStack: string }[] }).attempts[0]!;
        assert.equal(attempt.error, `${'a'.repeat(2000)}… [${big - 2000} more characters not shown]`);
        assert.equal(attempt.errorStack, `${'s'.repeat(2000)}… [${big - 2000} more characters not shown]`);
      }
      const jobs = (await (await fetch(`${url}/api/jobs`)).json()) as {
        jobs: { name: string; lastRun: { error: string } }[];
      };
      assert.ok(jobs.jobs.find((j) => j.name === 'yearly')!.lastRun.error.length < 2100);
    } finally {
      await db.pool.query('DELETE FROM cw_runs WHERE id = ANY($1::bigint[])', [runs.rows.map((r) => r.id)]);
    }
  });
});

describe('Host, Origin and the page', () => {
  it('answers only loopback names, IP addresses, the advertised host and allowed names; refuses others with 403', async () => {
    const { port } = await serve({
      advertisedUrl: 'http://cw-1.internal.example:8080',
      allowedHosts: ['admin.example.org'],
    });
    for (const host of [
      `127.0.0.1:${port}`,
      `localhost:${port}`,
      'localhost:9999',
      `[::1]:${port}`,
      '10.1.2.3:8080',
      'cw-1.internal.example:8080',
      'ADMIN.example.org',
      'localhost.',
    ]) {
      assert.equal((await send(port, '/api/members', { headers: { host } })).status, 200, host);
    }
    for (const host of [
      'attacker.example',
      `attacker.example:${port}`,
      'localhost.attacker.example',
      'cw-1.internal.example.attacker.example',
    ]) {
      const res = await send(port, '/api/members', { headers: { host } });
      assert.equal(res.status, 403, host);
      assert.equal(JSON.parse(res.body).code, 'forbidden_host');
      assert.doesNotMatch(res.body, /members/);
    }
  });

  it('refuses a mutation whose Origin is another site, even with the token, and changes nothing', async () => {
    const { port } = await serve();
    const headers = { authorization: `Bearer ${ADMIN_TOKEN}`, host: `127.0.0.1:${port}` };
    for (const origin of ['http://attacker.example', 'null', `http://127.0.0.1:${port + 1}`]) {
      const res = await send(port, '/api/jobs/yearly/pause', { method: 'POST', headers: { ...headers, origin } });
      assert.equal(res.status, 403, origin);
      assert.equal(JSON.parse(res.body).code, 'cross_origin');
    }
    const paused = await db.pool.query("SELECT paused FROM cw_job_state WHERE job = 'yearly'");
    assert.notEqual(paused.rows[0]?.paused, true);
    // The same origin (the page's own fetch) and no Origin (the CLI) are served.
    const same = await send(port, '/api/jobs/yearly/resume', {
      method: 'POST',
      headers: { ...headers, origin: `http://127.0.0.1:${port}` },
    });
    assert.equal(same.status, 200);
    assert.equal((await send(port, '/api/jobs/yearly/resume', { method: 'POST', headers })).status, 200);
  });

  it('the page sends a CSP that allows exactly its own inline script and style by hash and files of its origin, plus nosniff, no-referrer and DENY', async () => {
    const { url } = await serve();
    const res = await fetch(`${url}/`);
    const html = await res.text();
    const csp = res.headers.get('content-security-policy') ?? '';
    const hash = (tag: string) =>
      `'sha256-${createHash('sha256')
        .update(new RegExp(`<${tag}>([\\s\\S]*?)</${tag}>`).exec(html)![1]!)
        .digest('base64')}'`;
    assert.match(csp, /(^|; )default-src 'self'(;|$)/);
    // Inline blocks by hash; files (the vendored chart library under /assets/) only from this origin.
    assert.match(csp, new RegExp(`(^|; )script-src 'self' ${hash('script').replace(/[+/]/g, '\\$&')}(;|$)`));
    assert.match(csp, new RegExp(`(^|; )style-src 'self' ${hash('style').replace(/[+/]/g, '\\$&')}(;|$)`));
    assert.doesNotMatch(csp, /unsafe-inline|unsafe-eval/);
    assert.match(csp, /frame-ancestors 'none'/);
    for (const r of [res, await fetch(`${url}/api/lease`)]) {
      assert.equal(r.headers.get('x-content-type-options'), 'nosniff');
      assert.equal(r.headers.get('referrer-policy'), 'no-referrer');
      assert.equal(r.headers.get('x-frame-options'), 'DENY');
    }
  });
});

describe('handler text and who may read it (issue 25, item 12)', () => {
  it('credentials in a handler error are masked when stored and when served, whatever the ledger holds', async () => {
    const { url } = await serve();
    const secret =
      'postgres://app:s3cr3t-pw@db.internal:5432/app and redis://:hunter2@cache:6379 and host=db password=pa55';
    // What a handler throws is masked before the ledger keeps it.
    const stored = storedError(new Error(`connect failed: ${secret}`));
    assert.doesNotMatch(`${stored.message}\n${stored.stack}`, /s3cr3t-pw|hunter2|pa55/);
    assert.match(
      stored.message,
      /postgres:\/\/app:\*{5}@db\.internal:5432\/app and redis:\/\/:\*{5}@cache:6379 and host=db password=\*{5}/,
    );
    // A row stored before masking (or written by an older version) is masked on the way out.
    const { rows } = await db.pool.query<{ id: string }>(
      `INSERT INTO cw_runs (job, scheduled_at, trigger, leader_token, leader_id, state, finished_at, error)
       VALUES ('yearly', now() - interval '1 hour', 'manual', 1, 'old', 'failed', now(), $1) RETURNING id::text`,
      [secret],
    );
    try {
      await db.pool.query(
        `INSERT INTO cw_run_attempts (run_id, attempt, token, worker, state, finished_at, error, error_stack)
         VALUES ($1, 1, 1, 'w', 'failed', now(), $2, $2)`,
        [rows[0]!.id, secret],
      );
      for (const path of ['/api/runs?job=yearly', `/api/runs/${rows[0]!.id}`, '/api/jobs']) {
        const text = await (await fetch(`${url}${path}`)).text();
        assert.doesNotMatch(text, /s3cr3t-pw|hunter2|pa55/, path);
        assert.match(text, /app:\*{5}@db\.internal/, path);
      }
    } finally {
      await db.pool.query('DELETE FROM cw_runs WHERE id = $1', [rows[0]!.id]);
    }
  });

  it('with readsNeedToken the /api reads answer 401 without the token; the page, probes and metrics stay open', async () => {
    const { url } = await serve({ readsNeedToken: true });
    const auth = { authorization: `Bearer ${ADMIN_TOKEN}` };
    for (const path of ['/api/runs', '/api/jobs', '/api/lease', '/api/members', '/api/schedules', '/api/history']) {
      const open = await fetch(`${url}${path}`);
      assert.equal(open.status, 401, path);
      assert.equal(((await open.json()) as { code: string }).code, 'unauthorized');
      assert.equal(
        (await fetch(`${url}${path}`, { headers: { authorization: 'Bearer wrong-token-0123456789' } })).status,
        401,
      );
      assert.equal((await fetch(`${url}${path}`, { headers: auth })).status, 200, path);
    }
    for (const path of ['/', '/healthz', '/readyz', '/metrics'])
      assert.equal((await fetch(`${url}${path}`)).status, 200, path);
    // Without the setting, the same reads are open (the default).
    const { url: openUrl } = await serve();
    assert.equal((await fetch(`${openUrl}/api/runs`)).status, 200);
  });

  it('a replica refuses readsNeedToken without a token', () => {
    assert.throws(
      () => loadReplicaConfig({}, { ...requiredEnv, CRONWARDEN_ADMIN_READS_NEED_TOKEN: 'true' }),
      /CRONWARDEN_ADMIN_READS_NEED_TOKEN: needs CRONWARDEN_ADMIN_TOKEN/,
    );
    assert.doesNotThrow(() =>
      loadReplicaConfig(
        {},
        { ...requiredEnv, CRONWARDEN_ADMIN_READS_NEED_TOKEN: 'true', CRONWARDEN_ADMIN_TOKEN: ADMIN_TOKEN },
      ),
    );
  });
});
