/**
 * `npm run bench -- speed`: issue 14's speed figures, each beside a raw baseline of the same run.
 * - Lateness per load: N jobs due in the same second (default 1, 100, 1,000; `--loads 1,100,1000,10000`),
 *   a no-op handler, worker concurrency 10, `--replicas R` replicas (default 1). Three figures per
 *   load: commit (ledger), enqueued (handed to BullMQ), handler start, each minus the scheduled instant.
 * - Raw PostgreSQL: 250-row inserts from one connection (rows/s).
 * - Raw BullMQ addBulk (jobs/s) against the FireLoop's fires/s (committed and handed to BullMQ).
 * - Per-run overhead: runs/s of a handler whose ctx.transaction writes one row, against a raw BullMQ
 *   worker whose handler does the same insert in its own transaction, same concurrency (`--runs N`).
 */
import { randomUUID } from 'node:crypto';
import { Queue, Worker } from 'bullmq';
import { Redis } from 'ioredis';
import pg from 'pg';
import { pino } from 'pino';
import { defineJob } from '../src/jobs/define-job.js';
import { JobRegistry } from '../src/jobs/job-registry.js';
import { BullmqDelivery } from '../src/jobs/bullmq-delivery.js';
import { BullmqWorker } from '../src/jobs/bullmq-worker.js';
import { RunExecutor } from '../src/jobs/run-executor.js';
import { Ledger } from '../src/ledger/ledger.js';
import { MemoryLeaseBackend, MemoryLeaseStore } from '../src/locks/memory.js';
import { Replica } from '../src/replica/replica.js';
import { createTestDatabase } from '../test/support/postgres-database.js';
import { throughput } from './scheduler.js';
import { fmt, summarize, table } from './stats.js';

const REDIS_URL = process.env.CRONWARDEN_TEST_REDIS_URL ?? 'redis://127.0.0.1:6379';
const CONCURRENCY = 10;

function flag(name: string, fallback: string): string {
  const i = process.argv.indexOf(`--${name}`);
  return i >= 0 && process.argv[i + 1] ? process.argv[i + 1]! : fallback;
}

export async function benchSpeed(): Promise<Record<string, unknown>> {
  const loads = flag('loads', '1,100,1000').split(',').map(Number);
  const replicas = Number(flag('replicas', '1'));
  const runs = Number(flag('runs', '2000'));
  // `--only perRun,lateness` runs a subset (rawPostgres, firePath, perRun, lateness).
  const only = flag('only', 'rawPostgres,firePath,perRun,lateness').split(',');
  const results: Record<string, unknown> = { machine: 'shared 2-core machine, loaded by other work' };
  if (only.includes('rawPostgres')) results.rawPostgres = await rawPostgres();
  if (only.includes('firePath')) results.firePath = await throughput();
  if (only.includes('perRun')) results.perRun = await perRunOverhead(runs);
  if (!only.includes('lateness')) return results;
  results.lateness = [];
  for (const load of loads) (results.lateness as unknown[]).push(await lateness(load, replicas));
  return results;
}

/** Raw PostgreSQL: 250-row multi-row inserts from one connection. */
async function rawPostgres() {
  const db = await createTestDatabase({ migrate: false });
  const client = new pg.Client({ connectionString: db.url });
  await client.connect();
  try {
    await client.query(
      'CREATE TABLE raw_runs (id bigserial PRIMARY KEY, job text NOT NULL, scheduled_at timestamptz NOT NULL, UNIQUE (job, scheduled_at))',
    );
    const batches = 40;
    const at = Date.UTC(2026, 0, 1);
    const t = performance.now();
    for (let b = 0; b < batches; b++) {
      const jobs = Array.from({ length: 250 }, (_, i) => `j${i}`);
      await client.query(
        'INSERT INTO raw_runs (job, scheduled_at) SELECT j, $2::timestamptz FROM unnest($1::text[]) AS j',
        [jobs, new Date(at + b * 1000)],
      );
    }
    const rowsPerSecond = (batches * 250) / ((performance.now() - t) / 1000);
    table('Raw PostgreSQL, 250-row inserts from one connection', [{ 'rows/s': fmt(rowsPerSecond, 0) }]);
    return { rowsPerSecond };
  } finally {
    await client.end();
    await db.drop();
  }
}

/** Wait until `count()` reaches n (polled), or throw after timeoutMs. */
async function until(n: number, count: () => Promise<number>, timeoutMs: number): Promise<void> {
  const end = Date.now() + timeoutMs;
  for (;;) {
    if ((await count()) >= n) return;
    if (Date.now() > end) throw new Error(`timed out waiting for ${n} (have ${await count()})`);
    await new Promise((r) => setTimeout(r, 20));
  }
}

/**
 * Runs/s through BullMQ with a handler writing one row transactionally: raw (its own BEGIN /
 * INSERT / COMMIT) vs cronwarden (claim, ctx.transaction, completion). Each round fills its queue
 * before its worker starts; the clock runs from worker start to the last completion. Rounds go
 * raw, ours, ours, raw, so a change in the machine's load over the run weighs on both alike.
 */
async function perRunOverhead(n: number) {
  const db = await createTestDatabase();
  const redis = new Redis(REDIS_URL, { maxRetriesPerRequest: null });
  const pool = new pg.Pool({ connectionString: db.url, max: 10 });
  await pool.query('CREATE TABLE public.effects (run text PRIMARY KEY, at timestamptz NOT NULL DEFAULT now())');
  try {
    const half = Math.ceil(n / 2);
    let rawSeconds = await rawRound(redis, pool, half, 'a');
    let oursSeconds = await oursRound(redis, pool, half, 0);
    oursSeconds += await oursRound(redis, pool, half, half);
    rawSeconds += await rawRound(redis, pool, half, 'b');
    const raw = (2 * half) / rawSeconds;
    const ours = (2 * half) / oursSeconds;
    table(`Per-run overhead: ${2 * half} runs each, one transactional insert each, concurrency ${CONCURRENCY}`, [
      {
        'cronwarden runs/s': fmt(ours, 0),
        'raw BullMQ runs/s': fmt(raw, 0),
        ratio: fmt(ours / raw),
        target: '>= 0.50',
      },
    ]);
    return { runs: 2 * half, oursPerSecond: ours, rawPerSecond: raw, ratio: ours / raw };
  } finally {
    await pool.end();
    await redis.quit();
    await db.drop();
  }
}

/** A raw BullMQ worker whose handler inserts one row in its own transaction: seconds for n runs. */
async function rawRound(redis: Redis, pool: pg.Pool, n: number, tag: string): Promise<number> {
  const name = `raw-${randomUUID().slice(0, 8)}`;
  const queue = new Queue(name, { connection: redis });
  for (let i = 0; i < n; i += 1000) {
    const size = Math.min(1000, n - i);
    await queue.addBulk(
      Array.from({ length: size }, (_, k) => ({
        name: 'raw',
        data: { id: `${tag}${i + k}` },
        opts: { jobId: `r${i + k}` },
      })),
    );
  }
  const t = performance.now();
  const worker = new Worker(
    name,
    async (job) => {
      const c = await pool.connect();
      try {
        await c.query('BEGIN');
        await c.query('INSERT INTO public.effects (run) VALUES ($1)', [(job.data as { id: string }).id]);
        await c.query('COMMIT');
      } finally {
        c.release();
      }
    },
    { connection: redis.duplicate({ maxRetriesPerRequest: null }), concurrency: CONCURRENCY },
  );
  await until(n, () => queue.getCompletedCount(), 120_000);
  const seconds = (performance.now() - t) / 1000;
  await worker.close();
  await queue.obliterate({ force: true });
  await queue.close();
  return seconds;
}

/** cronwarden: n runs committed and enqueued first, then claimed and completed: seconds for n runs. */
async function oursRound(redis: Redis, pool: pg.Pool, n: number, offset: number): Promise<number> {
  const ns = `run${randomUUID().slice(0, 8)}`;
  const job = defineJob({
    name: 'write',
    schedule: '0 0 1 1 *',
    handler: async (ctx) => {
      await ctx.transaction((tx) => tx.query('INSERT INTO public.effects (run) VALUES ($1)', [ctx.runId]));
    },
  });
  const registry = new JobRegistry([job]);
  const ledger = new Ledger(pool);
  const delivery = new BullmqDelivery({ connection: redis, namespace: ns, registry, ledger });
  const stamp = { fenceResource: 'bench', token: 1n, replicaId: 'bench', stillLeading: () => true };
  const base = Date.UTC(2026, 0, 1) + offset * 1000;
  for (let i = 0; i < n; i += 250) {
    const fires = Array.from({ length: Math.min(250, n - i) }, (_, k) => ({
      job: 'write',
      scheduledAt: new Date(base + (i + k) * 1000),
      trigger: 'schedule' as const,
    }));
    const res = await ledger.fires.commitFires(fires, stamp);
    await delivery.enqueue(res.committed);
  }
  const logger = pino({ level: 'silent' });
  const executor = new RunExecutor({ ledger: ledger.runs, registry, replicaId: 'bench', logger });
  const worker = new BullmqWorker({ redis, namespace: ns, executor, logger, concurrency: CONCURRENCY });
  executor.setPublisher(worker.publisherFor());
  const t = performance.now();
  await worker.start();
  await until(n, () => delivery.queue.getCompletedCount(), 300_000);
  const seconds = (performance.now() - t) / 1000;
  await worker.close(1000);
  const done = await pool.query<{ n: string }>(
    `SELECT count(*) AS n FROM ${ledger.tables.runs} WHERE state = 'completed' AND scheduled_at >= $1`,
    [new Date(base)],
  );
  if (Number(done.rows[0]!.n) !== n) throw new Error(`ledger has ${done.rows[0]!.n} completed runs, expected ${n}`);
  await delivery.queue.obliterate({ force: true });
  await delivery.close();
  return seconds;
}

/** The seconds/minutes cron fields that fire at each of `instants` (whole seconds, within an hour). */
function cronAt(instants: number[]): string {
  const secs = new Set(instants.map((t) => new Date(t).getUTCSeconds()));
  const mins = new Set(instants.map((t) => new Date(t).getUTCMinutes()));
  return `${[...secs].join(',')} ${[...mins].join(',')} * * * *`;
}

/**
 * `load` jobs due in the same second, a few bursts (5 for small loads), on `replicas` replicas each
 * running a worker with concurrency 10. Commit lateness from the fire loop; enqueued from BullMQ's
 * job timestamp; handler start from inside the handler.
 */
async function lateness(load: number, replicas: number) {
  const db = await createTestDatabase();
  const bursts = load <= 100 ? 5 : load <= 1000 ? 3 : 1;
  const gap = load <= 100 ? 2000 : load <= 1000 ? 4000 : 1;
  const first = Math.ceil(Date.now() / 1000) * 1000 + 4000;
  const instants = Array.from({ length: bursts }, (_, k) => first + k * gap);
  const schedule = cronAt(instants);
  const handlerLate: number[] = [];
  const handler = (ctx: { scheduledAt: Date }) => {
    handlerLate.push(Date.now() - ctx.scheduledAt.getTime());
  };
  const jobs = Array.from({ length: load }, (_, i) => defineJob({ name: `j${i}`, schedule, timezone: 'UTC', handler }));
  const namespace = `late${randomUUID().slice(0, 8)}`;
  const store = new MemoryLeaseStore();
  const nodes = Array.from(
    { length: replicas },
    (_, r) =>
      new Replica({
        replicaId: `bench-${r}`,
        namespace,
        schema: db.schema,
        backend: new MemoryLeaseBackend({ store }),
        databaseUrl: db.url,
        redisUrl: REDIS_URL,
        jobs,
        worker: { concurrency: CONCURRENCY },
        logger: pino({ level: 'silent' }),
      }),
  );
  const commitLate: number[] = [];
  const expected = load * bursts;
  for (const node of nodes) {
    node.on('fire:committed', (fire, ms, trigger) => {
      if (trigger === 'schedule' && instants.includes(fire.scheduledAt.getTime())) commitLate.push(ms);
    });
  }
  const redis = new Redis(REDIS_URL);
  const queue = new Queue(`cronwarden-${namespace}`, { connection: redis });
  try {
    for (const node of nodes) await node.start();
    const deadline = instants.at(-1)! + 60_000 + load * 5;
    while (handlerLate.length < expected && Date.now() < deadline) await new Promise((r) => setTimeout(r, 50));
    const queued = await queue.getJobs(['completed', 'active', 'waiting', 'delayed'], 0, -1);
    const enqueueLate = queued
      .filter((j) => instants.includes(Date.parse((j.data as { scheduledAt: string }).scheduledAt)))
      .map((j) => j.timestamp - Date.parse((j.data as { scheduledAt: string }).scheduledAt));
    const c = summarize(commitLate);
    const e = summarize(enqueueLate);
    const h = summarize(handlerLate);
    table(`Lateness, ${load} due in the same second, ${bursts} burst(s), ${replicas} replica(s), concurrency 10`, [
      { measure: 'commit', 'p50 ms': fmt(c.p50, 0), 'p99 ms': fmt(c.p99, 0), n: c.n },
      { measure: 'enqueued', 'p50 ms': fmt(e.p50, 0), 'p99 ms': fmt(e.p99, 0), n: e.n },
      { measure: 'handler start', 'p50 ms': fmt(h.p50, 0), 'p99 ms': fmt(h.p99, 0), n: h.n },
    ]);
    return { load, bursts, replicas, expected, commit: c, enqueued: e, handlerStart: h };
  } finally {
    for (const node of nodes) await node.stop();
    await queue.obliterate({ force: true }).catch(() => {});
    await queue.close();
    await redis.quit();
    await db.drop();
  }
}
