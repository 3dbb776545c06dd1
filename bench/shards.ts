/**
 * `npm run bench -- shards`: sharded leadership at a burst (issue 14). `--load` jobs (default 10,000)
 * due in the same second, fired by real replica processes (`cronwarden start`, PostgreSQL lease
 * backend, worker concurrency 10 each) in four set-ups run one after another in the same run: the
 * baseline of one replica and one shard, then `--shards` shards (default 3) on 1, 2 and 3 replicas
 * (`--replicas 1,2,3`). Per set-up: fires/s committed in the burst, and lateness to the commit, to
 * the hand-over to BullMQ and to the handler's start (p50 / p99), each as a ratio to the baseline.
 * Commit and hand-over times come from the ledger (database clock), handler starts from the
 * handlers themselves (a Redis list), so nothing is measured inside the process that fires.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { fileURLToPath } from 'node:url';
import { setTimeout as sleep } from 'node:timers/promises';
import { Queue } from 'bullmq';
import { Redis } from 'ioredis';
import { tablesIn } from '../src/db/tables.js';
import { shardLeaseName } from '../src/scheduler/shards/shard-map.js';
import { createTestDatabase, type TestDatabase } from '../test/support/postgres-database.js';
import { fmt, summarize, table } from './stats.js';

const REDIS_URL = process.env.CRONWARDEN_TEST_REDIS_URL ?? 'redis://127.0.0.1:6379';
const root = fileURLToPath(new URL('..', import.meta.url));
const jobsModule = fileURLToPath(new URL('./fixtures/burst-jobs.ts', import.meta.url));

function flag(name: string, fallback: string): string {
  const i = process.argv.indexOf(`--${name}`);
  return i >= 0 && process.argv[i + 1] ? process.argv[i + 1]! : fallback;
}

interface SetUp {
  replicas: number;
  shards: number;
}

export async function benchShards(): Promise<Record<string, unknown>> {
  const load = Number(flag('load', '10000'));
  const shards = Number(flag('shards', '3'));
  const replicaCounts = flag('replicas', '1,2,3').split(',').map(Number);
  const setUps: SetUp[] = [{ replicas: 1, shards: 1 }, ...replicaCounts.map((replicas) => ({ replicas, shards }))];
  const results = [];
  for (const s of setUps) results.push(await burst(load, s));
  const base = results[0]!;
  table(
    `Sharded leadership: ${load} jobs due in the same second, replica processes, concurrency 10 each (baseline: 1 replica, 1 shard)`,
    results.map((r) => ({
      replicas: r.replicas,
      shards: r.shards,
      'fires/s': Math.round(r.firesPerSec),
      'fires/s ratio': fmt(r.firesPerSec / base.firesPerSec),
      'commit p50 / p99 ms': `${Math.round(r.commit.p50)} / ${Math.round(r.commit.p99)}`,
      'enqueued p99 ms': Math.round(r.enqueued.p99),
      'handler start p50 / p99 ms': `${Math.round(r.handlerStart.p50)} / ${Math.round(r.handlerStart.p99)}`,
      'handler p99 ratio': fmt(r.handlerStart.p99 / base.handlerStart.p99),
      'shards led': r.led.join(' / '),
      runs: `${r.handlerStart.n}/${load}`,
    })),
  );
  return { load, machine: '2 cores, replicas, PostgreSQL and Redis on one host', results };
}

async function burst(load: number, s: SetUp) {
  const db = await createTestDatabase();
  const namespace = `shb${randomUUID().slice(0, 8)}`;
  const key = `bench:burst:${namespace}`;
  const redis = new Redis(REDIS_URL);
  // Far enough ahead for the replicas to load 10,000 jobs and spread the shards.
  const instant = Math.ceil(Date.now() / 1000) * 1000 + 30_000;
  const at = new Date(instant);
  const schedule = `${at.getUTCSeconds()} ${at.getUTCMinutes()} ${at.getUTCHours()} * * *`;
  const procs: ChildProcess[] = [];
  try {
    for (let r = 0; r < s.replicas; r++) procs.push(startReplica(db, namespace, r, s.shards, load, schedule, key));
    const led = await spreadBefore(db, namespace, s, instant);
    const deadline = instant + 120_000;
    while ((await redis.llen(key)) < load && Date.now() < deadline) await sleep(200);
    const handlerLate = (await redis.lrange(key, 0, -1)).map(Number);
    const t = tablesIn(db.schema);
    const rows = await db.pool.query<{ commit_ms: number; enqueued_ms: number | null }>(
      `SELECT (extract(epoch FROM created_at - scheduled_at) * 1000)::float8 AS commit_ms,
              (extract(epoch FROM enqueued_at - scheduled_at) * 1000)::float8 AS enqueued_ms
       FROM ${t.runs} WHERE scheduled_at = $1 AND trigger IN ('schedule', 'catchup', 'standin')`,
      [at],
    );
    const commit = summarize(rows.rows.map((r) => Number(r.commit_ms)));
    const enqueued = summarize(rows.rows.filter((r) => r.enqueued_ms !== null).map((r) => Number(r.enqueued_ms)));
    const handlerStart = summarize(handlerLate);
    return { ...s, led, firesPerSec: (commit.n / commit.max) * 1000, commit, enqueued, handlerStart };
  } finally {
    for (const p of procs) p.kill('SIGTERM');
    await Promise.race([Promise.all(procs.map((p) => new Promise((r) => p.once('exit', r)))), sleep(15_000)]);
    for (const p of procs) p.kill('SIGKILL');
    const queue = new Queue(`cronwarden-${namespace}`, { connection: redis });
    await queue.obliterate({ force: true }).catch(() => {});
    await queue.close();
    await redis.del(key);
    await redis.quit();
    await db.drop();
  }
}

function startReplica(
  db: TestDatabase,
  namespace: string,
  r: number,
  shards: number,
  load: number,
  schedule: string,
  key: string,
): ChildProcess {
  return spawn(process.execPath, [`${root}/bin/cronwarden.js`, 'start', '--jobs', jobsModule], {
    cwd: root,
    stdio: ['ignore', 'ignore', 'inherit'],
    env: {
      ...process.env,
      CRONWARDEN_BACKEND: 'postgres',
      CRONWARDEN_BACKEND_URL: db.url,
      CRONWARDEN_DATABASE_URL: db.url,
      CRONWARDEN_REDIS_URL: REDIS_URL,
      CRONWARDEN_NAMESPACE: namespace,
      CRONWARDEN_SCHEMA: db.schema,
      CRONWARDEN_REPLICA_ID: `burst-${r}`,
      CRONWARDEN_SHARDS: String(shards),
      CRONWARDEN_CONCURRENCY: '10',
      CRONWARDEN_RETENTION_DAYS: '0',
      CRONWARDEN_LOG_LEVEL: 'error',
      CRONWARDEN_ADMIN_PORT: '0', // several replicas on one host: any free port each
      BENCH_BURST_JOBS: String(load),
      BENCH_BURST_SCHEDULE: schedule,
      BENCH_BURST_KEY: key,
    },
  });
}

/** Wait (until 3 s before the burst at most) for every replica to lead a share; how many each leads. */
async function spreadBefore(db: TestDatabase, namespace: string, s: SetUp, instant: number): Promise<number[]> {
  const leases = Array.from({ length: s.shards }, (_, i) => shardLeaseName(namespace, i, s.shards));
  const t = tablesIn(db.schema);
  let counts: number[] = [];
  while (Date.now() < instant - 3000) {
    const res = await db.pool
      .query<{ holder: string }>(`SELECT holder FROM ${t.leases} WHERE name = ANY($1) AND expires_at > now()`, [leases])
      .catch(() => ({ rows: [] as { holder: string }[] }));
    counts = Array.from({ length: s.replicas }, (_, r) => res.rows.filter((x) => x.holder === `burst-${r}`).length);
    const share = Math.ceil(s.shards / s.replicas);
    if (res.rows.length === s.shards && counts.every((c) => c <= share && c > 0)) break;
    await sleep(250);
  }
  return counts;
}
