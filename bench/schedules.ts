/**
 * `npm run bench -- schedules [--schedules 1000000]`: many schedules on one replica (default
 * 100,000; 86,400 distinct expressions at most, one per second of the day, none due while measured).
 * Reports: defining the jobs, start to an armed fire loop, the longest event-loop block (from start
 * to the end of the idle phase), heap per schedule, RSS, CPU while idle, and whether the lease held.
 * Baselines in the same run: the same count of bare `{ name, expression }` objects (heap), and an
 * idle Node process (CPU).
 */
import { randomUUID } from 'node:crypto';
import { monitorEventLoopDelay } from 'node:perf_hooks';
import { pino } from 'pino';
import { Queue } from 'bullmq';
import { Redis } from 'ioredis';
import { defineJob, type JobDefinition } from '../src/jobs/define-job.js';
import { MemoryLeaseBackend } from '../src/locks/memory.js';
import { Replica } from '../src/replica/replica.js';
import { createTestDatabase } from '../test/support/postgres-database.js';
import { fmt, table } from './stats.js';

const REDIS_URL = process.env.CRONWARDEN_TEST_REDIS_URL ?? 'redis://127.0.0.1:6379';
const IDLE_MS = 5000;

function flag(name: string, fallback: string): string {
  const i = process.argv.indexOf(`--${name}`);
  return i >= 0 && process.argv[i + 1] ? process.argv[i + 1]! : fallback;
}

/** One expression per second of the day, on a day of the month that is not today or tomorrow. */
function expression(i: number): string {
  const s = i % 86_400;
  const day = ((new Date().getUTCDate() + 10) % 28) + 1;
  return `${s % 60} ${Math.floor(s / 60) % 60} ${Math.floor(s / 3600)} ${day} * *`;
}

async function idleCpu(ms: number): Promise<number> {
  const before = process.cpuUsage();
  await new Promise((r) => setTimeout(r, ms));
  const used = process.cpuUsage(before);
  return (used.user + used.system) / 1000 / ms;
}

export async function benchSchedules(): Promise<Record<string, unknown>> {
  const gc = (globalThis as { gc?: () => void }).gc;
  if (!gc) throw new Error('run the benchmarks with node --expose-gc');
  const n = Number(flag('schedules', '100000'));
  const baselineCpu = await idleCpu(2000);
  gc();
  const heap0 = process.memoryUsage().heapUsed;
  const bare = Array.from({ length: n }, (_, i) => ({ name: `job-${i}`, expression: expression(i) }));
  gc();
  const bareBytes = (process.memoryUsage().heapUsed - heap0) / n;
  bare.length = 0;
  gc();
  const heapBefore = process.memoryUsage().heapUsed;
  const handler = () => {};
  let t = performance.now();
  const jobs: JobDefinition[] = Array.from({ length: n }, (_, i) =>
    defineJob({ name: `job-${i}`, schedule: expression(i), handler }),
  );
  const defineMs = performance.now() - t;
  const db = await createTestDatabase();
  const namespace = `many${randomUUID().slice(0, 8)}`;
  const replica = new Replica({
    replicaId: 'bench',
    namespace,
    schema: db.schema,
    backend: new MemoryLeaseBackend(),
    databaseUrl: db.url,
    redisUrl: REDIS_URL,
    jobs,
    worker: { enabled: false },
    logger: pino({ level: 'silent' }),
  });
  let lost = 0;
  replica.on('lease:lost', () => lost++);
  const delay = monitorEventLoopDelay({ resolution: 10 });
  let rssMax = 0;
  const rssTimer = setInterval(() => (rssMax = Math.max(rssMax, process.memoryUsage.rss())), 100);
  try {
    delay.enable();
    t = performance.now();
    const armed = new Promise<void>((resolve) => replica.shards.first.fireLoop.once('loop:armed', () => resolve()));
    await replica.start();
    await armed;
    const armMs = performance.now() - t;
    const cpu = await idleCpu(IDLE_MS);
    delay.disable();
    gc();
    const heapPerSchedule = (process.memoryUsage().heapUsed - heapBefore) / n;
    rssMax = Math.max(rssMax, process.memoryUsage.rss());
    const blockMs = delay.max / 1e6;
    table(`${n} schedules on one replica (one lease, worker off; machine shared and loaded)`, [
      { measure: 'define the jobs (ms)', value: fmt(defineMs, 0), baseline: '', target: '' },
      { measure: 'start to armed fire loop (ms)', value: fmt(armMs, 0), baseline: '', target: '<= 5000' },
      { measure: 'longest event-loop block (ms)', value: fmt(blockMs, 0), baseline: '', target: '<= 50' },
      {
        measure: 'heap per schedule (bytes)',
        value: fmt(heapPerSchedule, 0),
        baseline: `${fmt(bareBytes, 0)} (bare {name, expression})`,
        target: '<= 1024',
      },
      { measure: 'RSS max (MB)', value: fmt(rssMax / 2 ** 20, 0), baseline: '', target: '<= 1024' },
      {
        measure: 'CPU while idle (share of a core)',
        value: fmt(cpu, 3),
        baseline: `${fmt(baselineCpu, 3)} (idle process)`,
        target: '<= 0.05',
      },
      { measure: 'leases lost', value: lost, baseline: '', target: '0' },
    ]);
    return { schedules: n, defineMs, armMs, blockMs, heapPerSchedule, bareBytes, rssMax, cpu, baselineCpu, lost };
  } finally {
    clearInterval(rssTimer);
    await replica.stop();
    const redis = new Redis(REDIS_URL);
    await new Queue(`cronwarden-${namespace}`, { connection: redis }).obliterate({ force: true }).catch(() => {});
    await redis.quit();
    await db.drop();
  }
}
