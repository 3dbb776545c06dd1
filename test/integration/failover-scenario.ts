/**
 * The failover scenario every lease backend must survive: three replica processes share a lease
 * backend, PostgreSQL and Redis; jobs fire every second; the leader is stopped gracefully, then the
 * next leader is killed with SIGKILL. Afterwards the ledger must hold exactly one completed run per
 * job per second of the window, leader tokens must never decrease in commit order, and every run's
 * transactional effect must exist exactly once. While the killed leader's lease runs out, the
 * followers stand in (src/scheduler/stand-in/stand-in.ts): the slots due in that gap get their first effect
 * within the stand-in grace plus normal lateness, not a TTL later. One runtime schedule (made
 * through the ledger, as the admin API makes it) fires each second beside the jobs from code and
 * must come through the same way, stand-ins included.
 */
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { setTimeout as sleep } from 'node:timers/promises';
import type { BackendConfig } from '../../src/locks/create-backend.js';
import { checkHistory, readHistory } from '../../src/drill/checker.js';
import { Ledger } from '../../src/ledger/ledger.js';
import { createTestDatabase } from '../support/postgres-database.js';
import { ReplicaChild, waitForLeader } from '../support/replica-cluster.js';

export const SHARED_REDIS_URL = process.env.CRONWARDEN_TEST_REDIS_URL ?? 'redis://127.0.0.1:6379';

export interface ScenarioReport {
  seconds: number;
  runs: number;
  leaders: number;
  gracefulHandoverMs: number;
  crashHandoverMs: number;
  /** Slots due between the kill (plus 1 s, whose runs the dead worker may hold) and the next election. */
  crashGapSlots: number;
  /** Their first effect, after the slot: p50 / max in ms. */
  crashGapFirstEffectP50Ms: number;
  crashGapFirstEffectMaxMs: number;
  /** Runs in the whole window committed by a follower standing in. */
  standInFires: number;
  /** Of those, the runtime schedule's. */
  runtimeStandInFires: number;
}

/** The runtime schedule every scenario carries: job-0's handler, each second. */
const RUNTIME_JOB = 'job-0/every-second';

export async function runFailoverScenario(
  backend: (databaseUrl: string) => BackendConfig,
  options: { jobs?: number; ttlMs?: number; phaseMs?: number } = {},
): Promise<ScenarioReport> {
  const jobs = options.jobs ?? 3;
  const ttlMs = options.ttlMs ?? 5000;
  const phaseMs = options.phaseMs ?? 10_000;
  const db = await createTestDatabase();
  await db.pool.query(
    'CREATE TABLE cw_test_effects (run_id bigint NOT NULL, job text NOT NULL, scheduled_at timestamptz NOT NULL, token bigint NOT NULL, replica text NOT NULL, at timestamptz NOT NULL DEFAULT clock_timestamp())',
  );
  await new Ledger(db.pool, db.schema).schedules.create(
    'every-second',
    {
      handler: 'job-0',
      cron: '* * * * * *',
      timezone: 'UTC',
      misfire: 'all',
      overlap: 'allow',
      catchUpWindowMs: 300_000,
      misfireGraceMs: 2000,
      payload: null,
      paused: false,
    },
    'test',
  );
  const namespace = `t${randomUUID().slice(0, 8)}`;
  const replicas = ['r1', 'r2', 'r3'].map(
    (id) =>
      new ReplicaChild({
        replicaId: id,
        namespace,
        schema: db.schema,
        backend: backend(db.url),
        databaseUrl: db.url,
        redisUrl: SHARED_REDIS_URL,
        jobs,
        ttlMs,
      }),
  );
  try {
    const first = await waitForLeader(replicas, 60_000); // three processes loading under a busy host
    await sleep(phaseMs);
    // The window starts once every job has fired: a job is owed nothing before its first fire (the
    // first leader starts each job from its election; a runtime schedule may have a slot earlier).
    const t0 = await scalar<Date>(
      db.pool,
      'SELECT max(first) FROM (SELECT min(scheduled_at) AS first FROM cw_runs GROUP BY job) f',
    );
    assert.ok(t0, 'no fire committed in the first phase');

    // 1. Graceful stop of the leader: it resigns, a follower must lead almost at once.
    const stopAt = Date.now();
    first.signal('SIGTERM');
    const second = await waitForLeader(replicas, 10_000, [first]);
    const gracefulHandoverMs = Date.now() - stopAt;
    assert.equal(await first.exited, 0, 'a gracefully stopped replica exits 0');
    await sleep(phaseMs);

    // 2. Abrupt stop of the new leader: the last one must take over after the TTL.
    const killAt = Date.now();
    second.signal('SIGKILL');
    const third = await waitForLeader(replicas, ttlMs * 5, [first, second]);
    const crashHandoverMs = Date.now() - killAt;
    const gap = [new Date(killAt + 1000), new Date(Date.now() - 500)];
    await sleep(phaseMs);
    // The window must cover 30 s whatever the hand-overs took (it ends 2 s before now).
    const windowEnd = t0.getTime() + 30_000 + 2000 + 1000;
    if (Date.now() < windowEnd) await sleep(windowEnd - Date.now());

    const t1 = new Date(Math.floor((Date.now() - 2000) / 1000) * 1000);
    // Wait for delivery to finish: the killed replica's runs are re-delivered after BullMQ's lock.
    const inWindow = `scheduled_at BETWEEN $1 AND $2`;
    const deadline = Date.now() + 30_000;
    while (Date.now() < deadline) {
      const open = await scalar<number>(
        db.pool,
        `SELECT count(*)::int FROM cw_runs WHERE ${inWindow} AND state <> 'completed'`,
        [t0, t1],
      );
      if (open === 0) break;
      await sleep(500);
    }
    third.signal('SIGTERM');
    assert.equal(await third.exited, 0);

    const seconds = Math.round((t1.getTime() - t0.getTime()) / 1000) + 1;
    assert.ok(seconds >= 30, `window of ${seconds} s is shorter than 30 s`);
    const times = Array.from({ length: seconds }, (_, i) => t0.getTime() + i * 1000);
    const expected = new Map(Array.from({ length: jobs }, (_, i) => [`job-${i}`, times] as [string, number[]]));
    expected.set(RUNTIME_JOB, times);
    // The window the wait above saw settle: a slot after it may be mid-delivery when the last
    // replica's SIGTERM hands its runs back ('retrying', with no replica left to take them).
    const history = await readHistory(db.pool, {
      from: new Date(0),
      to: t1,
      effectsTable: 'cw_test_effects',
      schema: db.schema,
    });
    const report = checkHistory(history, { expected, requireCompleted: true });
    assert.deepEqual(report.violations, [], 'exactly-once violated');
    assert.ok(report.ok);
    const leaders = new Set(history.runs.map((r) => r.leaderToken)).size;
    assert.ok(leaders >= 3, `expected at least three leader tenures in the ledger, saw ${leaders}`);
    const runs = await scalar<number>(db.pool, `SELECT count(*)::int FROM cw_runs WHERE ${inWindow}`, [t0, t1]);
    const firstEffects = await db.pool.query<{ ms: number }>(
      `SELECT extract(epoch FROM min(at) - scheduled_at)::float * 1000 AS ms FROM cw_test_effects
       WHERE scheduled_at BETWEEN $1 AND $2 GROUP BY job, scheduled_at ORDER BY 1`,
      gap,
    );
    const lateness = firstEffects.rows.map((r) => r.ms);
    const standInFires = await scalar<number>(
      db.pool,
      `SELECT count(*)::int FROM cw_runs WHERE ${inWindow} AND trigger = 'standin'`,
      [t0, t1],
    );
    const runtimeStandInFires = await scalar<number>(
      db.pool,
      `SELECT count(*)::int FROM cw_runs WHERE ${inWindow} AND trigger = 'standin' AND job = $3`,
      [t0, t1, RUNTIME_JOB],
    );
    // The crash costs the stand-in grace (500 ms) plus normal lateness, not the lease's TTL.
    assert.ok((standInFires ?? 0) > 0, 'no follower stood in for the killed leader');
    assert.ok((runtimeStandInFires ?? 0) > 0, 'no follower stood in for the runtime schedule');
    assert.ok(
      lateness.length >= (jobs + 1) * 2,
      `only ${lateness.length} slots fell between the kill and the election`,
    );
    assert.ok(
      (lateness.at(-1) ?? Infinity) < ttlMs * 0.6,
      `a slot in the crash gap got its first effect ${lateness.at(-1)} ms late (TTL ${ttlMs} ms)`,
    );
    return {
      seconds,
      runs: runs ?? 0,
      leaders: leaders ?? 0,
      gracefulHandoverMs,
      crashHandoverMs,
      crashGapSlots: lateness.length,
      crashGapFirstEffectP50Ms: Math.round(lateness[Math.floor(lateness.length / 2)] ?? NaN),
      crashGapFirstEffectMaxMs: Math.round(lateness.at(-1) ?? NaN),
      standInFires: standInFires ?? 0,
      runtimeStandInFires: runtimeStandInFires ?? 0,
    };
  } finally {
    for (const r of replicas) r.signal('SIGKILL');
    await Promise.all(replicas.map((r) => r.exited));
    await db.drop();
  }
}

async function scalar<T>(
  pool: { query: (q: string, v?: unknown[]) => Promise<{ rows: Record<string, unknown>[] }> },
  q: string,
  v?: unknown[],
): Promise<T | undefined> {
  const res = await pool.query(q, v);
  const row = res.rows[0];
  return row ? (Object.values(row)[0] as T) : undefined;
}
