/**
 * The admin API under a flood (issue 12): a real `cronwarden start` replica (memory lease, the
 * shared PostgreSQL and Redis) fires 100 jobs every second; then 2,000 concurrent readers
 * (autocannon, two processes of 1,000 connections: /api/runs?limit=500 and /metrics) for 10 s.
 * Measured in the same run, without and with the flood: /healthz latency p50/p99 on the admin port
 * (answered by the admin thread) and on the probe port (answered by the scheduler's thread), each
 * probed every 100 ms from this process, which does nothing else, and fire lateness p99 from the
 * ledger (created_at, the fire transaction's start, minus scheduled_at), reported as ratios to the
 * no-flood baseline. The replica's threads' nice values are read from /proc (the admin thread's is
 * lowered by --admin-niceness, default 10).
 *
 * The readers stand for clients on other hosts: on this one machine their own CPU would otherwise
 * be counted against the replica, so they run at nice CRONWARDEN_FLOOD_CLIENT_NICE (default 19;
 * 0 measures them competing at the replica's priority).
 *
 * Set CRONWARDEN_FLOOD_BEFORE_ROOT to another checkout (e.g. the main branch before the admin
 * hardening) to measure its replica the same way in the same run.
 */
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { setPriority } from 'node:os';
import { readdirSync, readFileSync } from 'node:fs';
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
const CLIENT_NICE = Number(process.env.CRONWARDEN_FLOOD_CLIENT_NICE ?? 19);

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
      rows.push({ code: label, phase, ...healthCells(p.admin, r.baseline.admin), ...probeCells(p, r) });
    }
    const f = r.readers;
    const note = `readers: ${f.requests} answered, ${f.ok} 2xx, ${f.non2xx} other, ${f.errors} errors, ${f.timeouts} timeouts, p99 ${f.p99} ms; threads by nice: ${r.threads}`;
    rows.push({ code: label, phase: note, ...blank(rows[0]!) });
  }
  table(
    `Admin flood: /healthz on the admin and the probe port, and fire lateness, 100 jobs every second, without and with 2,000 concurrent readers for 10 s (readers at nice ${CLIENT_NICE})`,
    rows,
  );
  return results;
}

type Latency = { latency: ReturnType<typeof summarize>; failed: number };

interface Phase {
  /** /healthz on the admin port (the admin thread). */
  admin: Latency;
  /** /healthz on the probe port (the scheduler's thread); undefined for code without one. */
  probe: Latency | undefined;
  lateness: ReturnType<typeof summarize>;
}

function healthCells(p: Latency | undefined, base: Latency | undefined, prefix = ''): Record<string, string | number> {
  return {
    [`${prefix}/healthz p50 ms`]: p ? fmt(p.latency.p50, 1) : '-',
    [`${prefix}/healthz p99 ms`]: p ? fmt(p.latency.p99, 1) : '-',
    [`${prefix}p99 ratio`]: p && base ? fmt(p.latency.p99 / base.latency.p99) : '-',
    [`${prefix}failed`]: p ? p.failed : '-',
  };
}

function probeCells(p: Phase, r: { baseline: Phase }): Record<string, string | number> {
  return {
    ...healthCells(p.probe, r.baseline.probe, 'probe port '),
    'fire late p99 ms': fmt(p.lateness.p99, 1),
    'late ratio': fmt(p.lateness.p99 / r.baseline.lateness.p99),
    fires: p.lateness.n,
  };
}

const blank = (row: Record<string, unknown>) =>
  Object.fromEntries(Object.keys(row).flatMap((k) => (k === 'code' || k === 'phase' ? [] : [[k, '']])));

/** Whether the checkout at `root` has the probe listener (an older one refuses the flag). */
function hasProbePort(root: string): boolean {
  const help = spawnSync(process.execPath, [`${root}/bin/cronwarden.js`, 'start', '--help'], { cwd: root });
  return help.stdout.toString().includes('--probe-port');
}

/** How many of process `pid`'s threads run at each nice value, e.g. "0×11, 10×1". */
function threadsByNice(pid: number): string {
  const counts = new Map<number, number>();
  try {
    for (const tid of readdirSync(`/proc/${pid}/task`)) {
      const stat = readFileSync(`/proc/${pid}/task/${tid}/stat`, 'utf8');
      const nice = Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[19 - 3]);
      counts.set(nice, (counts.get(nice) ?? 0) + 1);
    }
  } catch {
    return 'n/a (no /proc)';
  }
  return [...counts]
    .sort(([a], [b]) => a - b)
    .map(([nice, n]) => `${nice}×${n}`)
    .join(', ');
}

async function measure(root: string) {
  const db = await createTestDatabase();
  const namespace = `flood${randomUUID().slice(0, 8)}`;
  const port = await freePort();
  const url = `http://127.0.0.1:${port}`;
  const probePort = hasProbePort(root) ? await freePort() : undefined;
  const probeUrl = probePort === undefined ? undefined : `http://127.0.0.1:${probePort}`;
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
      ...(probePort === undefined ? [] : ['--probe-port', String(probePort)]),
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
    const threads = threadsByNice(child.pid!);
    const baseline = await phase(db.pool, url, probeUrl, async () => {
      await sleep(PHASE_MS);
    });
    let readers: Awaited<ReturnType<typeof flood>> | undefined;
    const flooded = await phase(db.pool, url, probeUrl, async () => {
      readers = await flood(url);
    });
    return { baseline, flood: flooded, readers: readers!, threads };
  } finally {
    child.kill('SIGKILL');
    await new Promise((r) => child.once('exit', r));
    const redis = new Redis(REDIS_URL);
    await new Queue(`cronwarden-${namespace}`, { connection: redis }).obliterate({ force: true }).catch(() => {});
    await redis.quit();
    await db.drop();
  }
}

/**
 * Probes /healthz on the admin port and, if any, the probe port, each every 100 ms while `during`
 * runs, then reads the lateness of fires scheduled meanwhile.
 */
async function phase(
  pool: { query: (sql: string, args: unknown[]) => Promise<{ rows: { ms: number }[] }> },
  url: string,
  probeUrl: string | undefined,
  during: () => Promise<void>,
): Promise<Phase> {
  const from = new Date();
  const running = { on: true };
  const admin = prober(`${url}/healthz`, running);
  const probePort = probeUrl ? prober(`${probeUrl}/healthz`, running) : undefined;
  await during();
  running.on = false;
  const result = { admin: await admin, probe: await probePort };
  const to = new Date();
  await sleep(2000); // fires scheduled up to `to` commit
  const late = await pool.query(
    `SELECT (extract(epoch FROM created_at - scheduled_at) * 1000)::float8 AS ms FROM cw_runs
     WHERE trigger = 'schedule' AND scheduled_at >= $1 AND scheduled_at < $2`,
    [from, to],
  );
  return { ...result, lateness: summarize(late.rows.map((r) => r.ms)) };
}

/** GET `url` every 100 ms until `running.on` is false: latency of the 200s, count of the rest. */
async function prober(url: string, running: { on: boolean }): Promise<Latency> {
  const latencies: number[] = [];
  let failed = 0;
  while (running.on) {
    const t = performance.now();
    const r = await probe(url, 10_000);
    if (r.status === 200) latencies.push(performance.now() - t);
    else failed++;
    await sleep(100);
  }
  return { latency: summarize(latencies), failed };
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
      if (CLIENT_NICE !== 0 && p.pid !== undefined) setPriority(p.pid, CLIENT_NICE);
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
