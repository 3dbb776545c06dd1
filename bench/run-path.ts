/**
 * `npm run bench -- run-path`: runs per second through the whole run path, against a raw BullMQ
 * worker doing the same work in the same run, on throwaway servers (a durable PostgreSQL: fsync and
 * full-page writes on; a Redis) so each server's CPU and the WAL can be charged to the runs.
 *
 * The workloads, each with concurrency 10 and `--runs N` runs queued before the worker starts
 * (the clock runs from worker start to the last completion, i.e. to the moment each run is done):
 * - write: the handler inserts one row. Raw: BEGIN / INSERT / COMMIT on a pooled client.
 *   cronwarden: `ctx.transaction((tx) => tx.query(INSERT))`, so the row and the run's completion
 *   commit together.
 * - pipelined: as write, with `ctx.transaction(fn, { pipelined: true })` (each group's callbacks at
 *   once, their INSERTs pipelined on its connection); raw does the same as for write.
 * - empty: the handler does nothing. cronwarden still claims (a durable token) and completes.
 * - medium (on request): the handler waits MEDIUM_MS, as most jobs' handlers take tens or hundreds of
 *   ms; at most MEDIUM_RUNS runs a round. Runs/s is the slots' (both sides alike); what it shows is
 *   the CPU a run costs when runs end one by one rather than in batches, and handing back.
 * Rounds go raw, ours, ours, raw per workload, so a drift in the machine's load weighs on both.
 * Reported: runs/s and its ratio, CPU ms per run (Node, PostgreSQL, Redis, total), WAL bytes per run.
 */
import { randomUUID } from 'node:crypto';
import { setTimeout as sleep } from 'node:timers/promises';
import { Queue, Worker } from 'bullmq';
import { Redis } from 'ioredis';
import pg from 'pg';
import { pino } from 'pino';
import { defineJob } from '../src/jobs/define-job.js';
import { JobRegistry } from '../src/jobs/job-registry.js';
import { BullmqDelivery } from '../src/jobs/bullmq-delivery.js';
import { BullmqWorker } from '../src/jobs/bullmq-worker.js';
import { RunExecutor } from '../src/jobs/run-executor.js';
import { RunLedgerBatches } from '../src/jobs/run-ledger-batches.js';
import { Ledger } from '../src/ledger/ledger.js';
import { startPostgresCluster, type PostgresCluster } from '../src/drill/servers/postgres-cluster.js';
import { startRedis, type TestRedis } from '../src/drill/servers/redis-server.js';
import { cpuMsOf, loadAverage, ownCpuMs } from './cpu.js';
import { fmt, table } from './stats.js';

const CONCURRENCY = 10;
export type Workload = 'write' | 'pipelined' | 'empty' | 'medium';
/** The medium workload's handler time, and its most runs a round (10 s of its slots). */
const MEDIUM_MS = 100;
const MEDIUM_RUNS = 1000;

export interface Servers {
  pg: PostgresCluster;
  redis: TestRedis;
  pool: pg.Pool;
  conn: Redis;
}

interface Round {
  seconds: number;
  cpu: { node: number; postgres: number; redis: number };
  walBytes: number;
}

function flag(name: string, fallback: string): string {
  const i = process.argv.indexOf(`--${name}`);
  return i >= 0 && process.argv[i + 1] ? process.argv[i + 1]! : fallback;
}

export async function benchRunPath(): Promise<Record<string, unknown>> {
  const runs = Number(flag('runs', '10000'));
  const workloads = flag('workloads', 'write,pipelined,empty').split(',') as Workload[];
  const s = await servers();
  const loadBefore = loadAverage();
  const results: Record<string, unknown> = { runs, concurrency: CONCURRENCY, loadBefore };
  try {
    for (const w of workloads) {
      const n = w === 'medium' ? Math.min(runs, MEDIUM_RUNS) : runs;
      const result = await compareRunPath(s, w, n);
      results[w] = result;
      const handler = w === 'medium' ? `${MEDIUM_MS} ms` : w;
      table(`Run path, ${handler} handler: ${2 * n} runs each, concurrency ${CONCURRENCY}`, runPathRows(result));
    }
  } finally {
    results.loadAfter = loadAverage();
    console.log(`load average ${loadBefore} before, ${String(results.loadAfter)} after`);
    await s.pool.end();
    await s.conn.quit();
    await s.redis.cleanup();
    await s.pg.cleanup();
  }
  return results;
}

export type RunPathComparison = { raw: ReturnType<typeof sum>; ours: ReturnType<typeof sum>; ratio: number };

/**
 * The raw BullMQ worker and cronwarden's run path on the same servers, rounds raw, ours, ours, raw
 * (so a drift in the machine's load weighs on both), `runs` runs a round. `speed` reports the same.
 */
export async function compareRunPath(s: Servers, w: Workload, runs: number): Promise<RunPathComparison> {
  const raw1 = await rawRound(s, w, runs);
  const ours1 = await oursRound(s, w, runs);
  const ours2 = await oursRound(s, w, runs);
  const raw2 = await rawRound(s, w, runs);
  const raw = sum(raw1, raw2, runs);
  const ours = sum(ours1, ours2, runs);
  return { raw, ours, ratio: ours.runsPerSecond / raw.runsPerSecond };
}

/** The comparison as table rows: each side's runs/s, CPU per run by process, WAL per run; the ratio. */
export function runPathRows(c: RunPathComparison): Record<string, string>[] {
  return [
    row('raw BullMQ', c.raw),
    row('cronwarden', c.ours),
    { who: 'ratio', 'runs/s': fmt(c.ratio), 'CPU ms/run': '', node: '', postgres: '', redis: '', 'WAL B/run': '' },
  ];
}

function row(who: string, r: ReturnType<typeof sum>): Record<string, string> {
  return {
    who,
    'runs/s': fmt(r.runsPerSecond, 0),
    'CPU ms/run': fmt(r.cpuMsPerRun.total, 3),
    node: fmt(r.cpuMsPerRun.node, 3),
    postgres: fmt(r.cpuMsPerRun.postgres, 3),
    redis: fmt(r.cpuMsPerRun.redis, 3),
    'WAL B/run': fmt(r.walBytesPerRun, 0),
  };
}

function sum(a: Round, b: Round, runs: number) {
  const n = 2 * runs;
  const per = (x: number) => x / n;
  const cpu = {
    node: per(a.cpu.node + b.cpu.node),
    postgres: per(a.cpu.postgres + b.cpu.postgres),
    redis: per(a.cpu.redis + b.cpu.redis),
  };
  return {
    runsPerSecond: n / (a.seconds + b.seconds),
    cpuMsPerRun: { ...cpu, total: cpu.node + cpu.postgres + cpu.redis },
    walBytesPerRun: per(a.walBytes + b.walBytes),
  };
}

export async function servers(): Promise<Servers> {
  const pgc = await startPostgresCluster({ durable: true });
  const redis = await startRedis();
  const pool = new pg.Pool({ connectionString: pgc.url, max: 12 });
  pool.on('error', () => undefined); // the server is stopped under idle clients at the end
  await pool.query('CREATE TABLE public.effects (run text PRIMARY KEY, at timestamptz NOT NULL DEFAULT now())');
  return { pg: pgc, redis, pool, conn: new Redis(redis.url, { maxRetriesPerRequest: null }) };
}

/** Measure `work` (which resolves when every run is done): wall time, each side's CPU, WAL. */
async function measured(s: Servers, work: () => Promise<void>): Promise<Round> {
  const wal = async () =>
    BigInt((await s.pool.query<{ lsn: string }>("SELECT pg_current_wal_lsn() - '0/0' AS lsn")).rows[0]!.lsn);
  const cpu = () => ({
    node: ownCpuMs(),
    postgres: cpuMsOf(s.pg.server.pids()),
    redis: cpuMsOf([s.redis.server.pid!]),
  });
  const walBefore = await wal();
  const before = cpu();
  const t = performance.now();
  await work();
  const seconds = (performance.now() - t) / 1000;
  const after = cpu();
  const walAfter = await wal();
  return {
    seconds,
    cpu: {
      node: after.node - before.node,
      postgres: after.postgres - before.postgres,
      redis: after.redis - before.redis,
    },
    walBytes: Number(walAfter - walBefore),
  };
}

/** Poll `count()` until it reaches n. */
async function until(n: number, count: () => Promise<number>): Promise<void> {
  const end = Date.now() + 600_000;
  for (;;) {
    if ((await count()) >= n) return;
    if (Date.now() > end) throw new Error(`timed out waiting for ${n} (have ${await count()})`);
    await new Promise((r) => setTimeout(r, 25));
  }
}

/** A raw BullMQ worker whose handler inserts one row in its own transaction (or does nothing). */
async function rawRound(s: Servers, w: Workload, n: number): Promise<Round> {
  const name = `raw-${randomUUID().slice(0, 8)}`;
  const queue = new Queue(name, { connection: s.conn });
  const tag = randomUUID().slice(0, 8);
  for (let i = 0; i < n; i += 1000) {
    const size = Math.min(1000, n - i);
    await queue.addBulk(
      Array.from({ length: size }, (_, k) => ({
        name: 'raw',
        data: { id: `${tag}-${i + k}` },
        opts: { jobId: `r${i + k}`, removeOnComplete: { age: 3600 } },
      })),
    );
  }
  let worker: Worker | undefined;
  const connection = s.conn.duplicate({ maxRetriesPerRequest: null });
  const round = await measured(s, async () => {
    worker = new Worker(
      name,
      async (job) => {
        if (w === 'empty') return;
        if (w === 'medium') return sleep(MEDIUM_MS);
        const c = await s.pool.connect();
        try {
          await c.query('BEGIN');
          await c.query('INSERT INTO public.effects (run) VALUES ($1)', [(job.data as { id: string }).id]);
          await c.query('COMMIT');
        } finally {
          c.release();
        }
      },
      { connection, concurrency: CONCURRENCY },
    );
    await until(n, () => queue.getCompletedCount());
  });
  await worker?.close();
  await connection.quit();
  await queue.obliterate({ force: true });
  await queue.close();
  return round;
}

/**
 * cronwarden's run path as a replica wires it: n runs committed and handed over first, then run.
 * Their slots are a second apart from `base` (default 2020-01-01).
 */
export async function oursRound(s: Servers, w: Workload, n: number, base = Date.UTC(2020, 0, 1)): Promise<Round> {
  const ns = `run${randomUUID().slice(0, 8)}`;
  const jobName = `bench-${ns}`;
  const job = defineJob({
    name: jobName,
    schedule: '0 0 1 1 *',
    handler:
      w === 'empty'
        ? () => undefined
        : w === 'medium'
          ? () => sleep(MEDIUM_MS)
          : async (ctx) => {
              await ctx.transaction(
                (tx) => tx.query('INSERT INTO public.effects (run) VALUES ($1)', [`${ns}-${ctx.runId}`]),
                { pipelined: w === 'pipelined' },
              );
            },
  });
  const registry = new JobRegistry([job]);
  const ledger = new Ledger(s.pool);
  const delivery = new BullmqDelivery({ connection: s.conn, namespace: ns, registry, ledger });
  const stamp = { fenceResource: `bench/${ns}`, token: 1n, replicaId: 'bench', stillLeading: () => true };
  for (let i = 0; i < n; i += 250) {
    const fires = Array.from({ length: Math.min(250, n - i) }, (_, k) => ({
      job: jobName,
      scheduledAt: new Date(base + (i + k) * 1000),
      trigger: 'schedule' as const,
    }));
    const res = await ledger.fires.commitFires(fires, stamp);
    await delivery.enqueue(res.committed);
    // As the fire loop does once BullMQ took them: the runs' hand-over rows go (before the clock runs).
    await ledger.fires.markEnqueued(res.committed.map((f) => f.runId));
  }
  const logger = pino({ level: 'silent' });
  const executor = new RunExecutor({
    ledger: new RunLedgerBatches(ledger.runs),
    registry,
    replicaId: `bench-${ns}`,
    logger,
    redeliver: (run, delayMs) => delivery.redeliverAfter(run, delayMs),
  });
  const worker = new BullmqWorker({
    redis: s.conn,
    namespace: ns,
    executor,
    logger,
    concurrency: CONCURRENCY,
    liveness: ledger.runs,
  });
  executor.setPublisher(worker.publisherFor());
  // Done once no run of the job is unfinished: one probe of cw_open_runs' job index, as cheap as
  // the raw side's completed count in Redis (a count(*) over the job's runs, or a scan of its
  // finished ones, would charge its reads to cronwarden's PostgreSQL time).
  const unfinished = async () =>
    (await s.pool.query(`SELECT 1 FROM ${ledger.tables.openRuns} WHERE job = $1 LIMIT 1`, [jobName])).rowCount ?? 0;
  const round = await measured(s, async () => {
    await worker.start();
    await until(1, async () => 1 - (await unfinished()));
  });
  const completed = await s.pool.query<{ n: number }>(
    `SELECT count(*)::int AS n FROM ${ledger.tables.runs} WHERE job = $1 AND state = 'completed'`,
    [jobName],
  );
  if (completed.rows[0]!.n !== n) throw new Error(`${completed.rows[0]!.n} of ${n} runs completed`);
  await worker.close(1000);
  await delivery.queue.obliterate({ force: true });
  await delivery.close();
  return round;
}
