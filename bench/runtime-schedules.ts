/**
 * Runtime schedules on one leader, each due at a different minute (once a year, at minute i after
 * the start): time to load them from the ledger and plan them (RuntimeSchedules.load + the fire
 * loop's first tenure), heap per schedule, and that no slot is missed over the first minutes.
 * Baselines from the same run: the same number of jobs defined in code (defineJob + registry +
 * the same fire loop), for heap and time.
 *
 * Default 10,000 schedules, so it runs in about a minute; the target is 100,000:
 * `CRONWARDEN_BENCH_SCHEDULES=100000 npm run bench -- runtime-schedules`.
 */
import { pino } from 'pino';
import { defineJob } from '../src/jobs/define-job.js';
import { JobRegistry } from '../src/jobs/job-registry.js';
import { validateSchedule } from '../src/jobs/schedule-input.js';
import { Ledger } from '../src/ledger/ledger.js';
import type { ScheduledJobs } from '../src/cron/scheduled-job.js';
import { FireLoop, type FireLoopLedger } from '../src/scheduler/firing/fire-loop.js';
import { RuntimeSchedules, withRuntimeSchedules } from '../src/scheduler/schedules/runtime-schedules.js';
import type { DeliverableRun } from '../src/scheduler/firing/run-delivery.js';
import type { Lease } from '../src/locks/lease.js';
import { ManualClock } from '../test/support/manual-clock.js';
import { createTestDatabase } from '../test/support/postgres-database.js';
import { fmt, table } from './stats.js';

const MINUTE = 60_000;
/** Minutes stepped through after loading, every one with exactly one slot due. */
const CHECKED_MINUTES = 120;

/** Due once a year, at `base + i` minutes (UTC). */
function cronAt(base: number, i: number): string {
  const d = new Date(base + i * MINUTE);
  return `${d.getUTCMinutes()} ${d.getUTCHours()} ${d.getUTCDate()} ${d.getUTCMonth() + 1} *`;
}

export async function benchRuntimeSchedules(): Promise<Record<string, unknown>> {
  const gc = (globalThis as { gc?: () => void }).gc;
  if (!gc) throw new Error('run the benchmarks with node --expose-gc');
  const n = Number(process.env.CRONWARDEN_BENCH_SCHEDULES ?? 10_000);
  // After the import (a schedule has no slots before it was created): the next whole minute but one.
  const base = (Math.ceil(Date.now() / MINUTE) + 1) * MINUTE;
  const handler = defineJob({ name: 'report', schedule: '0 0 1 1 *', handler: () => {} });
  const code = new JobRegistry([handler]);
  const db = await createTestDatabase();
  try {
    const ledger = new Ledger(db.pool, db.schema);
    let t = performance.now();
    const spec = (i: number) => validateSchedule(`s${i}`, { handler: 'report', schedule: cronAt(base, i) }, code);
    for (let i = 0; i < n; i += 5000) {
      const items = Array.from({ length: Math.min(5000, n - i) }, (_, k) => ({ id: `s${i + k}`, spec: spec(i + k) }));
      await ledger.schedules.importMany(items, 'bench');
    }
    const importMs = performance.now() - t;

    // Runtime: load from the ledger and lead (plan every schedule's next slot).
    const clock = new ManualClock(base - 30_000);
    gc();
    let heap0 = process.memoryUsage().heapUsed;
    t = performance.now();
    const schedules = new RuntimeSchedules({
      code,
      ledger: ledger.schedules,
      clock,
      logger: pino({ level: 'silent' }),
    });
    await schedules.load();
    const loadMs = performance.now() - t;
    const fired: DeliverableRun[] = [];
    const loop = leader(schedules, withRuntimeSchedules(ledger.fires, schedules), clock, fired);
    const tenure = new AbortController();
    t = performance.now();
    await loop.lead(tenure.signal);
    const leadMs = performance.now() - t;
    gc();
    const runtimeBytes = (process.memoryUsage().heapUsed - heap0) / n;

    // No slot missed: step minute by minute, each minute's one slot fires once.
    for (let m = 0; m < Math.min(CHECKED_MINUTES, n); m++) {
      await clock.advanceTo(base + m * MINUTE + 200);
      await loop.tick(); // the commit of this minute's slot, before the clock moves on
    }
    const checked = Math.min(CHECKED_MINUTES, n);
    const slots = new Set(fired.map((r) => `${r.job}@${r.scheduledAt.getTime()}`));
    tenure.abort();
    loop.stop();

    // Baseline: the same schedules as jobs from code, in the same fire loop.
    const clock2 = new ManualClock(base - 30_000);
    gc();
    heap0 = process.memoryUsage().heapUsed;
    t = performance.now();
    const registry = new JobRegistry(
      Array.from({ length: n }, (_, i) => defineJob({ name: `c${i}`, schedule: cronAt(base, i), handler: () => {} })),
    );
    const defineMs = performance.now() - t;
    const loop2 = leader(registry, emptyLedger(), clock2, []);
    t = performance.now();
    await loop2.lead(new AbortController().signal);
    const codeLeadMs = performance.now() - t;
    gc();
    const codeBytes = (process.memoryUsage().heapUsed - heap0) / n;
    loop2.stop();
    const held = [schedules.size, registry.size]; // keep both alive until measured

    const result = {
      schedules: n,
      importMs: Math.round(importMs),
      loadMs: Math.round(loadMs),
      leadMs: Math.round(leadMs),
      codeDefineMs: Math.round(defineMs),
      codeLeadMs: Math.round(codeLeadMs),
      startupRatio: (loadMs + leadMs) / (defineMs + codeLeadMs),
      heapPerScheduleBytes: Math.round(runtimeBytes),
      heapPerCodeJobBytes: Math.round(codeBytes),
      heapRatio: runtimeBytes / codeBytes,
      checkedMinutes: checked,
      slotsFired: slots.size,
      slotsMissed: checked - slots.size,
      duplicateEnqueues: fired.length - slots.size,
      held,
    };
    table(`runtime schedules: ${n} loaded on one leader, each due at a different minute`, [
      {
        what: 'runtime (load + lead)',
        'start-up ms': `${result.loadMs} + ${result.leadMs}`,
        'heap/schedule B': result.heapPerScheduleBytes,
      },
      {
        what: 'baseline: jobs from code (define + lead)',
        'start-up ms': `${result.codeDefineMs} + ${result.codeLeadMs}`,
        'heap/schedule B': result.heapPerCodeJobBytes,
      },
      {
        what: 'ratio runtime / code',
        'start-up ms': fmt(result.startupRatio),
        'heap/schedule B': fmt(result.heapRatio),
      },
    ]);
    console.log(
      `import through the ledger: ${result.importMs} ms; first ${checked} minutes: ${slots.size} slots fired, ${result.slotsMissed} missed, ${result.duplicateEnqueues} twice`,
    );
    return result;
  } finally {
    await db.drop();
  }
}

function leader(registry: ScheduledJobs, ledger: FireLoopLedger, clock: ManualClock, fired: DeliverableRun[]) {
  const lease: Lease = { name: 'b', holder: 'b', token: 1n, ttlMs: 10_000, safetyMarginMs: 1000, deadline: Infinity };
  return new FireLoop({
    registry,
    ledger,
    delivery: { enqueue: async (runs) => void fired.push(...runs), cancel: async () => {} },
    leadership: { lease: () => lease, stepDown: (why) => console.error(`bench leader stepped down: ${why}`) },
    clock,
    logger: pino({ level: 'silent' }),
    replicaId: 'bench',
    fenceResource: 'scheduler/bench',
    outboxIntervalMs: 3_600_000,
  });
}

/** The baseline's ledger at election: nothing fired yet (only lead() is measured). */
function emptyLedger(): FireLoopLedger {
  return {
    advanceFence: async () => {},
    lastFired: async () => new Map(),
    commitFires: async () => ({ committed: [], duplicates: 0, cancelled: [] }),
    markEnqueued: async () => {},
    unenqueued: async () => [],
    pauses: async () => new Map(),
    activeJobs: async () => new Map(),
    openEras: async () => new Map(),
    openNewEras: async () => {},
  };
}
