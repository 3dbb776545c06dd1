/**
 * The admin API under a flood (issue 12): a real `cronwarden start` replica (memory lease, the
 * shared PostgreSQL and Redis) fires 100 jobs every second; then 2,000 concurrent readers
 * (autocannon, two processes of 1,000 connections: /api/runs?limit=500 and /metrics) for 10 s.
 * Measured in the same run, without and with the flood: /healthz latency p50/p99 (probed every
 * 100 ms from this process, which does nothing else) and fire lateness p99 from the ledger
 * (created_at, the fire transaction's start, minus scheduled_at), reported as ratios to the
 * no-flood baseline.
 *
 * Set CRONWARDEN_FLOOD_BEFORE_ROOT to another checkout (e.g. the main branch before the admin
 * hardening) to measure its replica the same way in the same run.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { createServer } from 'node:net';
import { fileURLToPath } from 'node:url';
import { Queue } from 'bullmq';
import { Redis } from 'ioredis';
import { createTestDatabase } from '../test/support/postgres-database.js';
import { fmt, summarize, table } from './stats.js';

const REDIS_URL = process.env.CRONWARDEN_TEST_REDIS_URL ?? 'redis://127.0.0.1:6379';
const here = fileURLToPath(new URL('..', import.meta.url));
const jobsModule = fileURLToPath(new URL('./fixtures/flood-jobs.ts', import.meta.url));
const autocannonBin = fileURLToPath(new URL('../node_modules/autocannon/autocannon.js', import.meta.url));
const PHASE_MS = 10_000;

export async function benchAdminFlood(): Promise<Record<string, unknown>> {
  const roots: [string, string][] = [['this checkout', here]];
  const before = process.env.CRONWARDEN_FLOOD_BEFORE_ROOT;
  if (before) roots.unshift(['before (' + before + ')', before]);
  const results: Record<string, unknown> = {};
  const rows: Record<string, string | number>[] = [];
  for (const [label, root] of roots) {
    const r = await measure(root);
    results[label] = r;
    for (const [phase, p] of [
      ['no flood', r.baseline],
      ['2,000 readers', r.flood],
    ] as const) {
      rows.push({
        code: label,
        phase,
        '/healthz p50 ms': fmt(p.health.p50, 1),
        '/healthz p99 ms': fmt(p.health.p99, 1),
        'p99 ratio': fmt(p.health.p99 / r.baseline.health.p99),
        '/healthz failed': p.healthFailed,
        'fire late p99 ms': fmt(p.lateness.p99, 1),
        'late ratio': fmt(p.lateness.p99 / r.baseline.lateness.p99),
        fires: p.lateness.n,
      });
    }
    const f = r.readers;
    rows.push({
      code: label,
      phase: `readers: ${f.requests} answered, ${f.ok} 2xx, ${f.non2xx} other, ${f.errors} errors, ${f.timeouts} timeouts, p99 ${f.p99} ms`,
      '/healthz p50 ms': '',
      '/healthz p99 ms': '',
      'p99 ratio': '',
      '/healthz failed': '',
      'fire late p99 ms': '',
      'late ratio': '',
      fires: '',
    });
  }
  table(
    'Admin flood: /healthz and fire lateness, 100 jobs every second, without and with 2,000 concurrent readers for 10 s',
    rows,
  );
  return results;
}

interface Phase {
  health: ReturnType<typeof summarize>;
  healthFailed: number;
  lateness: ReturnType<typeof summarize>;
}

async function measure(root: string) {
  const db = await createTestDatabase();
  const namespace = `flood${randomUUID().slice(0, 8)}`;
  const port = await freePort();
  const url = `http://127.0.0.1:${port}`;
  const child = spawn(
    process.execPath,
    [
      `${root}/bin/cronwarden.js`,
      'start',
      '--backend',
      'memory',
      '--jobs',
      jobsModule,
      '--namespace',
      namespace,
      '--schema',
      db.schema,
      '--admin-port',
      String(port),
      '--log-level',
      'error',
      '--concurrency',
      '50',
      '--retention-days',
      '0',
    ],
    {
      cwd: root,
      env: { ...process.env, CRONWARDEN_DATABASE_URL: db.url, CRONWARDEN_REDIS_URL: REDIS_URL },
      stdio: ['ignore', 'ignore', 'inherit'],
    },
  );
  try {
    await until(
      async () => ((await probe(`${url}/api/lease`, 2000)).body as { role?: string } | undefined)?.role === 'leader',
      30_000,
    );
    await sleep(3000); // warm up
    const baseline = await phase(db.pool, url, async () => {
      await sleep(PHASE_MS);
    });
    let readers: Awaited<ReturnType<typeof flood>> | undefined;
    const flooded = await phase(db.pool, url, async () => {
      readers = await flood(url);
    });
    return { baseline, flood: flooded, readers: readers! };
  } finally {
    child.kill('SIGKILL');
    await new Promise((r) => child.once('exit', r));
    const redis = new Redis(REDIS_URL);
    await new Queue(`cronwarden-${namespace}`, { connection: redis }).obliterate({ force: true }).catch(() => {});
    await redis.quit();
    await db.drop();
  }
}

/** Probes /healthz every 100 ms while `during` runs, then reads the lateness of fires scheduled meanwhile. */
async function phase(
  pool: { query: (sql: string, args: unknown[]) => Promise<{ rows: { ms: number }[] }> },
  url: string,
  during: () => Promise<void>,
): Promise<Phase> {
  const from = new Date();
  let running = true;
  const latencies: number[] = [];
  let failed = 0;
  const prober = (async () => {
    while (running) {
      const t = performance.now();
      const r = await probe(`${url}/healthz`, 10_000);
      if (r.status === 200) latencies.push(performance.now() - t);
      else failed++;
      await sleep(100);
    }
  })();
  await during();
  running = false;
  await prober;
  const to = new Date();
  await sleep(2000); // fires scheduled up to `to` commit
  const late = await pool.query(
    `SELECT (extract(epoch FROM created_at - scheduled_at) * 1000)::float8 AS ms FROM cw_runs
     WHERE trigger = 'schedule' AND scheduled_at >= $1 AND scheduled_at < $2`,
    [from, to],
  );
  return { health: summarize(latencies), healthFailed: failed, lateness: summarize(late.rows.map((r) => r.ms)) };
}

/** 2,000 concurrent readers for PHASE_MS: two autocannon processes of 1,000 connections each. */
async function flood(url: string) {
  const run = (path: string) =>
    new Promise<{
      requests: { total: number };
      '2xx': number;
      non2xx: number;
      errors: number;
      timeouts: number;
      latency: { p99: number };
    }>((resolve, reject) => {
      const p: ChildProcess = spawn(
        process.execPath,
        [autocannonBin, '-c', '1000', '-d', String(PHASE_MS / 1000), '-t', '10', '-j', `${url}${path}`],
        { stdio: ['ignore', 'pipe', 'ignore'] },
      );
      let out = '';
      p.stdout!.on('data', (d: Buffer) => (out += d.toString()));
      p.once('exit', () => {
        try {
          resolve(JSON.parse(out));
        } catch (err) {
          reject(new Error(`autocannon printed no result: ${(err as Error).message}`));
        }
      });
    });
  const [a, b] = await Promise.all([run('/api/runs?limit=500'), run('/metrics')]);
  return {
    requests: a.requests.total + b.requests.total,
    ok: a['2xx'] + b['2xx'],
    non2xx: a.non2xx + b.non2xx,
    errors: a.errors + b.errors,
    timeouts: a.timeouts + b.timeouts,
    p99: Math.max(a.latency.p99, b.latency.p99),
  };
}

async function probe(url: string, timeoutMs: number): Promise<{ status: number; body?: unknown }> {
  try {
    const res = await fetch(url, { signal: AbortSignal.timeout(timeoutMs) });
    return { status: res.status, body: await res.json().catch(() => undefined) };
  } catch {
    return { status: 0 };
  }
}

async function until(check: () => Promise<boolean>, timeoutMs: number): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!(await check())) {
    if (Date.now() > deadline) throw new Error('the replica did not lead in time');
    await sleep(200);
  }
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

async function freePort(): Promise<number> {
  const srv = createServer();
  await new Promise<void>((r) => srv.listen(0, '127.0.0.1', r));
  const port = (srv.address() as { port: number }).port;
  await new Promise((r) => srv.close(r));
  return port;
}
