/**
 * Scheduler benchmarks, each beside a baseline measured in the same run:
 * - fires/s into BullMQ through the leader's FireLoop, driven by a manual clock (pause and overlap
 *   checks, fence + unique insert, addBulk, mark enqueued, and the outbox sweep alongside) vs raw
 *   BullMQ addBulk of the same jobs;
 * - fire lateness (ms after the scheduled instant) with 1,000 jobs due every second, a real leader;
 * - heap per schedule with 100,000 schedules loaded vs raw croner objects, and next-fire time; and
 *   heap per loaded job (defineJob + registry + its entry in the fire queue).
 */
import { randomUUID } from 'node:crypto';
import { Cron } from 'croner';
import { Queue } from 'bullmq';
import { Redis } from 'ioredis';
import { pino } from 'pino';
import { defineJob } from '../src/jobs/define-job.js';
import { JobRegistry } from '../src/jobs/job-registry.js';
import { BullmqDelivery } from '../src/jobs/bullmq-delivery.js';
import { MemoryLeaseBackend } from '../src/locks/memory.js';
import { CronSchedule } from '../src/cron/cron-schedule.js';
import { Ledger } from '../src/ledger/ledger.js';
import { FireLoop } from '../src/scheduler/firing/fire-loop.js';
import { FireQueue } from '../src/scheduler/firing/fire-queue.js';
import { ManualClock } from '../test/support/manual-clock.js';
import type { Lease } from '../src/locks/lease.js';
import { Replica } from '../src/replica/replica.js';
import { createTestDatabase } from '../test/support/postgres-database.js';
import { fmt, summarize, table } from './stats.js';

const REDIS_URL = process.env.CRONWARDEN_TEST_REDIS_URL ?? 'redis://127.0.0.1:6379';

export async function benchScheduler(): Promise<Record<string, unknown>> {
  const results: Record<string, unknown> = {};
  results.throughput = await throughput();
  results.lateness = await lateness();
  results.memory = memory();
  return results;
}

export async function throughput() {
  const db = await createTestDatabase();
  const redis = new Redis(REDIS_URL, { maxRetriesPerRequest: null });
  const jobs = 1000;
  const rounds = 30;
  const registry = new JobRegistry(
    Array.from({ length: jobs }, (_, i) => defineJob({ name: `j${i}`, schedule: '* * * * * *', handler: () => {} })),
  );
  const ns = `bench${randomUUID().slice(0, 8)}`;
  const ledger = new Ledger(db.pool);
  const delivery = new BullmqDelivery({ connection: redis, namespace: ns, registry, ledger });
  const rawQueue = new Queue(`raw-${ns}`, { connection: redis });
  const base = Date.UTC(2026, 0, 1);
  const clock = new ManualClock(base - 500);
  const lease: Lease = {
    name: 'bench',
    holder: 'bench',
    token: 1n,
    ttlMs: 10_000,
    safetyMarginMs: 1000,
    deadline: Infinity,
  };
  const loop = new FireLoop({
    registry,
    ledger: ledger.fires,
    delivery,
    leadership: { lease: () => lease, stepDown: (why) => console.error(`bench leader stepped down: ${why}`) },
    clock,
    logger: pino({ level: 'silent' }),
    replicaId: 'bench',
    fenceResource: 'scheduler/bench',
  });
  const tenure = new AbortController();
  try {
    // Warm both paths once.
    await rawQueue.addBulk([{ name: 'w', data: {}, opts: { jobId: 'warm' } }]);
    await loop.lead(tenure.signal);
    await clock.advance(1000);
    await loop.tick();

    // Raw and ours take turns, round by round, so a drift in the machine's speed (large here from
    // one second to the next) weighs on both sides alike.
    let fired = 0;
    loop.on('fire:committed', () => fired++);
    let rawSeconds = 0;
    let oursSeconds = 0;
    for (let r = 0; r < rounds; r++) {
      let t = performance.now();
      await rawQueue.addBulk(
        Array.from({ length: jobs }, (_, i) => ({
          name: `j${i}`,
          data: { runId: String(r * jobs + i), job: `j${i}`, scheduledAt: new Date(base + r * 1000).toISOString() },
          opts: { jobId: `run-${r}-${i}`, attempts: 1, removeOnComplete: { age: 3600 } },
        })),
      );
      rawSeconds += (performance.now() - t) / 1000;
      t = performance.now();
      await clock.advance(1000); // the loop's one timer fires: every job is due
      await loop.tick(); // resolves once the tick the timer started has committed and enqueued
      oursSeconds += (performance.now() - t) / 1000;
    }
    tenure.abort();
    if (fired !== jobs * rounds) throw new Error(`the fire loop committed ${fired} fires, expected ${jobs * rounds}`);
    const raw = (jobs * rounds) / rawSeconds;
    const ours = (jobs * rounds) / oursSeconds;
    const row = {
      path: 'cronwarden FireLoop (policies + ledger + BullMQ)',
      'fires/s': fmt(ours, 0),
      'raw addBulk/s': fmt(raw, 0),
      ratio: fmt(ours / raw),
      target: '>= 0.80',
    };
    table(`Fires into BullMQ, 1,000 jobs per tick, ${rounds} ticks, raw and ours in turn`, [row]);
    return { firesPerSecond: ours, rawAddBulkPerSecond: raw, ratio: ours / raw };
  } finally {
    tenure.abort();
    await delivery.queue.obliterate({ force: true }).catch(() => {});
    await rawQueue.obliterate({ force: true }).catch(() => {});
    await delivery.close();
    await rawQueue.close();
    await redis.quit();
    await db.drop();
  }
}

async function lateness() {
  const db = await createTestDatabase();
  const jobs = Array.from({ length: 1000 }, (_, i) =>
    defineJob({ name: `j${i}`, schedule: '* * * * * *', handler: () => {} }),
  );
  const replica = new Replica({
    replicaId: 'bench',
    namespace: `late${randomUUID().slice(0, 8)}`,
    schema: db.schema,
    backend: new MemoryLeaseBackend(),
    databaseUrl: db.url,
    redisUrl: REDIS_URL,
    jobs,
    worker: { enabled: false },
    logger: pino({ level: 'silent' }),
  });
  const late: number[] = [];
  replica.on('fire:committed', (_fire, ms, trigger) => {
    if (trigger === 'schedule') late.push(ms);
  });
  await replica.start();
  await new Promise((r) => setTimeout(r, 12_000));
  await replica.stop();
  const redis = new Redis(REDIS_URL);
  await new Queue(`cronwarden-${replica.namespace}`, { connection: redis }).obliterate({ force: true }).catch(() => {});
  await redis.quit();
  await db.drop();
  // Baseline: how late a bare setTimeout aimed at the next whole second fires on this machine now.
  const timerLate: number[] = [];
  for (let i = 0; i < 5; i++) {
    await new Promise<void>((resolve) => {
      const target = Math.ceil(Date.now() / 1000) * 1000;
      setTimeout(() => {
        timerLate.push(Date.now() - target);
        resolve();
      }, target - Date.now());
    });
  }
  const s = summarize(late);
  const b = summarize(timerLate);
  table('Fire lateness, 1,000 jobs due every second (commit time minus scheduled instant)', [
    { measure: 'cronwarden fire committed', 'p50 ms': fmt(s.p50, 1), 'p99 ms': fmt(s.p99, 1), fires: s.n },
    { measure: 'baseline: bare setTimeout', 'p50 ms': fmt(b.p50, 1), 'p99 ms': fmt(b.p99, 1), fires: b.n },
  ]);
  return { p50: s.p50, p99: s.p99, fires: s.n, baselineTimerP50: b.p50 };
}

function memory() {
  const gc = (globalThis as { gc?: () => void }).gc;
  if (!gc) throw new Error('run the benchmarks with node --expose-gc');
  const n = 100_000;
  const exprs = (i: number) => `${i % 60} ${(i * 7) % 60} * * * *`;
  const measure = (make: (i: number) => unknown) => {
    gc();
    const before = process.memoryUsage().heapUsed;
    const keep = Array.from({ length: n }, (_, i) => make(i));
    gc();
    const after = process.memoryUsage().heapUsed;
    return { bytes: (after - before) / n, keep };
  };
  const ours = measure((i) => CronSchedule.parse(exprs(i), i % 2 ? 'Europe/Berlin' : 'UTC'));
  const t = performance.now();
  const now = Date.now();
  for (const s of ours.keep as CronSchedule[]) s.nextAfter(now);
  const nextAllMs = performance.now() - t;
  ours.keep = [];
  const raw = measure((i) => new Cron(exprs(i), { paused: true, timezone: i % 2 ? 'Europe/Berlin' : 'UTC' }));
  const t2 = performance.now();
  for (const c of raw.keep as Cron[]) c.nextRun(new Date(now));
  const rawNextAllMs = performance.now() - t2;
  raw.keep = [];
  // Worst case: no two schedules share an expression, so none shares a parsed pattern.
  const distinct = (i: number) =>
    `${i % 60} ${Math.floor(i / 60) % 60} ${Math.floor(i / 3600) % 24} ${1 + (Math.floor(i / 86400) % 28)} * *`;
  const worst = measure((i) => CronSchedule.parse(distinct(i), i % 2 ? 'Europe/Berlin' : 'UTC'));
  worst.keep = [];
  // What a leader really holds per job: the validated definition, its registry slot, and its entry
  // in the fire queue (every expression distinct, the worst case).
  const handler = () => {};
  const loaded = (() => {
    gc();
    const before = process.memoryUsage().heapUsed;
    const registry = new JobRegistry(
      Array.from({ length: n }, (_, i) =>
        defineJob({ name: `job-${i}`, schedule: distinct(i), timezone: i % 2 ? 'Europe/Berlin' : 'UTC', handler }),
      ),
    );
    const queue = new FireQueue();
    const now = Date.now();
    for (const job of registry.list())
      queue.push({ at: job.schedule.nextAfter(now) ?? now, job: job.name, after: now });
    gc();
    const bytes = (process.memoryUsage().heapUsed - before) / n;
    return { bytes, size: queue.size + registry.list().length };
  })();
  table('100,000 schedules loaded (3,600 distinct expressions, half in Europe/Berlin)', [
    {
      measure: 'heap per schedule, every expression distinct (bytes)',
      cronwarden: fmt(worst.bytes, 0),
      'raw croner': fmt(raw.bytes, 0),
      ratio: fmt(worst.bytes / raw.bytes),
      target: '< 2048 bytes',
    },
    {
      measure: 'heap per schedule (bytes)',
      cronwarden: fmt(ours.bytes, 0),
      'raw croner': fmt(raw.bytes, 0),
      ratio: fmt(ours.bytes / raw.bytes),
      target: '< 2048 bytes',
    },
    {
      measure: 'heap per loaded job: definition + registry + fire-queue entry, every expression distinct (bytes)',
      cronwarden: fmt(loaded.bytes, 0),
      'raw croner': fmt(raw.bytes, 0),
      ratio: fmt(loaded.bytes / raw.bytes),
      target: '< 2048 bytes',
    },
    {
      measure: 'next fire for all (ms)',
      cronwarden: fmt(nextAllMs, 0),
      'raw croner': fmt(rawNextAllMs, 0),
      ratio: fmt(nextAllMs / rawNextAllMs),
      target: '',
    },
  ]);
  return {
    heapBytesPerSchedule: ours.bytes,
    heapBytesPerScheduleAllDistinct: worst.bytes,
    heapBytesPerLoadedJob: loaded.bytes,
    rawCronerBytes: raw.bytes,
    nextAllMs,
    rawNextAllMs,
  };
}
