/**
 * Doubled effects under worker crashes: cronwarden beside its peer, BullMQ job schedulers, in the
 * same run and under the same load (the measurement behind ctx.transaction):
 *   3 worker processes, 20 schedules firing every second, handlers that write their effect to
 *   PostgreSQL and then work 1 s more, one worker killed with SIGKILL (and restarted) every 20 s.
 * Both sides get the same BullMQ lock, stall check and concurrency. The peer's handler writes its
 * effect as a BullMQ user would; cronwarden's writes it in ctx.transaction. A killed worker's
 * runs are re-delivered after the lock expires; the question is whether the re-delivery writes
 * the effect a second time.
 *
 * Counted per side from its effect table, over the same window of scheduled slots (job, second):
 * slots whose effect was written twice or more, and slots with no effect at all.
 * `BENCH_EFFECTS_SECONDS` (default 110: 2,200 slots, 5 kills), `BENCH_EFFECTS_LOCK_MS` (default 5000).
 */
import { randomUUID } from 'node:crypto';
import { fileURLToPath } from 'node:url';
import { setTimeout as sleep } from 'node:timers/promises';
import { Queue } from 'bullmq';
import { Redis } from 'ioredis';
import type pg from 'pg';
import { EventedChild } from '../test/support/evented-child.js';
import { createTestDatabase } from '../test/support/postgres-database.js';
import { ReplicaChild, waitForLeader } from '../test/support/replica-cluster.js';
import type { ReplicaProcessConfig } from '../test/fixtures/replica-process.js';
import { table } from './stats.js';

const REDIS_URL = process.env.CRONWARDEN_TEST_REDIS_URL ?? 'redis://127.0.0.1:6379';
const SECONDS = Number(process.env.BENCH_EFFECTS_SECONDS ?? 110);
const LOCK_MS = Number(process.env.BENCH_EFFECTS_LOCK_MS ?? 5000);
const JOBS = 20;
const WORKERS = 3;
const KILL_EVERY_MS = 20_000;
const WORK_MS = 1000;
const CONCURRENCY = 10;
const jobNames = Array.from({ length: JOBS }, (_, i) => `job-${i}`);
const peerWorker = fileURLToPath(new URL('./fixtures/bullmq-scheduler-worker.ts', import.meta.url));

/** One system under test: N worker processes that can be killed, and the table its effects land in. */
interface Contender {
  readonly label: string;
  readonly effectsTable: string;
  start(): Promise<void>;
  /** SIGKILL worker `index` and start a fresh one in its place. */
  killAndReplace(index: number): Promise<void>;
  /** True once every slot up to `to` has been worked off (re-deliveries included). */
  settled(to: Date): Promise<boolean>;
  close(): Promise<void>;
}

interface EffectCounts {
  slots: number;
  effects: number;
  doubledSlots: number;
  extraEffects: number;
  missedSlots: number;
  kills: number;
  seconds: number;
}

async function countEffects(
  pool: pg.Pool,
  tableName: string,
  from: Date,
  to: Date,
): Promise<Omit<EffectCounts, 'kills' | 'seconds'>> {
  const { rows } = await pool.query<{ slots: number; effects: number; doubled: number }>(
    `SELECT count(*)::int AS slots, coalesce(sum(n), 0)::int AS effects, (count(*) FILTER (WHERE n > 1))::int AS doubled
     FROM (SELECT job, scheduled_at, count(*) AS n FROM ${tableName}
           WHERE scheduled_at BETWEEN $1 AND $2 AND job = ANY($3::text[]) GROUP BY job, scheduled_at) per_slot`,
    [from, to, jobNames],
  );
  const r = rows[0]!;
  const expected = JOBS * (Math.round((to.getTime() - from.getTime()) / 1000) + 1);
  return {
    slots: expected,
    effects: r.effects,
    doubledSlots: r.doubled,
    extraEffects: r.effects - r.slots,
    missedSlots: expected - r.slots,
  };
}

/** Start, let it warm up, kill a worker every KILL_EVERY_MS across the window, let it settle, count. */
async function measure(contender: Contender, pool: pg.Pool): Promise<EffectCounts> {
  await contender.start();
  await sleep(3000);
  const from = new Date(Math.ceil(Date.now() / 1000) * 1000);
  const end = from.getTime() + SECONDS * 1000;
  let kills = 0;
  while (Date.now() + KILL_EVERY_MS < end) {
    await sleep(KILL_EVERY_MS);
    await contender.killAndReplace(kills++ % WORKERS);
  }
  await sleep(Math.max(0, end - Date.now()));
  const to = new Date(Math.floor(Date.now() / 1000) * 1000 - 2000);
  const giveUp = Date.now() + 3 * LOCK_MS + 30_000;
  while (Date.now() < giveUp && !(await contender.settled(to))) await sleep(500);
  const counts = await countEffects(pool, contender.effectsTable, from, to);
  await contender.close();
  return { ...counts, kills, seconds: (to.getTime() - from.getTime()) / 1000 + 1 };
}

function bullmqJobSchedulers(databaseUrl: string): Contender {
  const prefix = `peer${randomUUID().slice(0, 8)}`;
  const queueName = 'effects';
  const connection = new Redis(REDIS_URL, { maxRetriesPerRequest: null });
  const queue = new Queue(queueName, { connection, prefix });
  const workers: EventedChild[] = [];
  let generation = 0;
  const spawnWorker = async () => {
    const name = `peer-${++generation}`;
    const child = EventedChild.fixture(name, peerWorker, {
      name,
      redisUrl: REDIS_URL,
      prefix,
      queue: queueName,
      databaseUrl,
      lockMs: LOCK_MS,
      workMs: WORK_MS,
      concurrency: CONCURRENCY,
    });
    await child.waitFor((e) => e.event === 'ready', 30_000);
    return child;
  };
  let schedulersRemoved = false;
  return {
    label: 'BullMQ job schedulers (peer)',
    effectsTable: 'peer_effects',
    async start() {
      for (let i = 0; i < WORKERS; i++) workers.push(await spawnWorker());
      for (const name of jobNames) await queue.upsertJobScheduler(name, { pattern: '* * * * * *' }, { name });
    },
    async killAndReplace(index) {
      await workers[index]!.kill();
      workers[index] = await spawnWorker();
    },
    async settled() {
      if (!schedulersRemoved) {
        for (const name of jobNames) await queue.removeJobScheduler(name);
        schedulersRemoved = true;
      }
      const counts = await queue.getJobCounts('active', 'wait', 'prioritized');
      return (counts.active ?? 0) + (counts.wait ?? 0) + (counts.prioritized ?? 0) === 0;
    },
    async close() {
      await Promise.all(workers.map((w) => w.kill()));
      await queue.obliterate({ force: true });
      await queue.close();
      await connection.quit();
    },
  };
}

function cronwarden(databaseUrl: string, pool: pg.Pool): Contender {
  const namespace = `fx${randomUUID().slice(0, 8)}`;
  let generation = 0;
  const config = (): ReplicaProcessConfig => ({
    replicaId: `r${++generation}`,
    namespace,
    backend: { kind: 'postgres', url: databaseUrl },
    databaseUrl,
    redisUrl: REDIS_URL,
    jobs: JOBS,
    ttlMs: 2000,
    lockDurationMs: LOCK_MS,
    handlerMs: WORK_MS,
  });
  const replicas: ReplicaChild[] = [];
  return {
    label: 'cronwarden, ctx.transaction',
    effectsTable: 'cw_test_effects',
    async start() {
      for (let i = 0; i < WORKERS; i++) replicas.push(new ReplicaChild(config()));
      await waitForLeader(replicas, 30_000);
    },
    async killAndReplace(index) {
      await replicas[index]!.kill();
      replicas[index] = new ReplicaChild(config());
    },
    async settled(to) {
      const { rows } = await pool.query<{ n: number }>(
        `SELECT count(*)::int AS n FROM cw_runs WHERE scheduled_at <= $1 AND state <> 'completed'`,
        [to],
      );
      return rows[0]!.n === 0;
    },
    async close() {
      await Promise.all(replicas.map((r) => r.kill()));
    },
  };
}

export async function benchEffects(): Promise<Record<string, unknown>> {
  const db = await createTestDatabase();
  try {
    await db.pool.query(
      'CREATE TABLE peer_effects (job text NOT NULL, scheduled_at timestamptz NOT NULL, worker text NOT NULL)',
    );
    await db.pool.query(
      'CREATE TABLE cw_test_effects (run_id bigint NOT NULL, job text NOT NULL, scheduled_at timestamptz NOT NULL, token bigint NOT NULL, replica text NOT NULL)',
    );
    const results: Record<string, EffectCounts> = {};
    for (const contender of [bullmqJobSchedulers(db.url), cronwarden(db.url, db.pool)]) {
      process.stderr.write(`effects: measuring ${contender.label} for ${SECONDS} s…\n`);
      results[contender.label] = await measure(contender, db.pool);
    }
    table(
      `Doubled effects: ${WORKERS} workers, ${JOBS} jobs every second, handlers working ${WORK_MS} ms after their write, ` +
        `a SIGKILL every ${KILL_EVERY_MS / 1000} s, BullMQ lock ${LOCK_MS} ms`,
      Object.entries(results).map(([label, r]) => ({
        system: label,
        'window s': r.seconds,
        kills: r.kills,
        slots: r.slots,
        'effects written': r.effects,
        'slots doubled': r.doubledSlots,
        'per 1,000 slots': ((1000 * r.doubledSlots) / r.slots).toFixed(1),
        'slots missed': r.missedSlots,
      })),
    );
    return { jobs: JOBS, workers: WORKERS, killEveryMs: KILL_EVERY_MS, workMs: WORK_MS, lockMs: LOCK_MS, results };
  } finally {
    await db.drop();
  }
}
