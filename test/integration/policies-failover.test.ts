/**
 * Issue 16's policies through a leader failover, with real processes: three replicas, every job
 * due each second, the leader killed with SIGKILL
 * - in the middle of a pause's expiry: every slot before `until` is recorded skipped with the
 *   reason, every slot at or after it fires, each once; the pause is lifted once across replicas;
 * - during an outage with maxCatchUp 1: the new leader fires at most the newest late slot per job,
 *   the older ones are missed (no run, one stored range that `cronwarden explain` reads back with
 *   the reason and the deciding tenure), every other slot fires once.
 */
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { setTimeout as sleep } from 'node:timers/promises';
import { Ledger } from '../../src/ledger/ledger.js';
import { readOccurrences } from '../../src/ledger/occurrence-reads.js';
import { createTestDatabase, type TestDatabase } from '../support/postgres-database.js';
import { createEffectsTable, replicaProcesses, waitForLeader, type ReplicaChild } from '../support/replica-cluster.js';
import type { ReplicaProcessConfig } from '../fixtures/replica-process.js';
import { SHARED_REDIS_URL } from './failover-scenario.js';

const TTL_MS = 3000;

interface RunRow {
  job: string;
  at: number;
  state: string;
  trigger: string;
  token: string;
  error: string | null;
  effects: number;
}

async function cluster(jobOptions: ReplicaProcessConfig['jobOptions'] = {}, ttlMs = TTL_MS, standInGraceMs?: number) {
  const db = await createTestDatabase();
  await createEffectsTable(db);
  const replicas = replicaProcesses(db, {
    namespace: `pol${randomUUID().slice(0, 8)}`,
    redisUrl: SHARED_REDIS_URL,
    jobs: 2,
    ttlMs,
    jobOptions,
    standInGraceMs,
  });
  return { db, replicas };
}

/** Stop the survivors gracefully once every run up to `t1` settled; the runs of that window. */
async function settle(db: TestDatabase, replicas: ReplicaChild[], t1: number): Promise<RunRow[]> {
  const deadline = Date.now() + 30_000;
  while (Date.now() < deadline) {
    const open = await db.pool.query<{ n: number }>(
      `SELECT count(*)::int AS n FROM cw_runs WHERE scheduled_at <= $1 AND state IN ('pending', 'running', 'retrying')`,
      [new Date(t1)],
    );
    if (open.rows[0]!.n === 0) break;
    await sleep(250);
  }
  for (const r of replicas) r.signal('SIGTERM');
  await Promise.all(replicas.map((r) => r.exited));
  const res = await db.pool.query<Omit<RunRow, 'at'> & { scheduled_at: Date }>(
    `SELECT r.job, r.scheduled_at, r.state, r.trigger, r.leader_token::text AS token, r.error,
       (SELECT count(*)::int FROM cw_test_effects e WHERE e.run_id = r.id) AS effects
     FROM cw_runs r WHERE r.scheduled_at <= $1 AND r.trigger <> 'manual' ORDER BY r.job, r.scheduled_at`,
    [new Date(t1)],
  );
  return res.rows.map(({ scheduled_at, ...r }) => ({ ...r, at: scheduled_at.getTime() }));
}

function ofJob(runs: RunRow[], job: string): RunRow[] {
  return runs.filter((r) => r.job === job);
}

/** Every second in [from, to]. */
function seconds(from: number, to: number): number[] {
  return Array.from({ length: Math.floor((to - from) / 1000) + 1 }, (_, i) => from + i * 1000);
}

describe('policies through a leader failover (three replicas, PostgreSQL lease)', () => {
  it(
    'a pause expiring while the leader is down: slots before until skipped, at or after it fired, each once',
    { timeout: 120_000 },
    async () => {
      const { db, replicas } = await cluster();
      try {
        const first = await waitForLeader(replicas, 60_000);
        await sleep(2000);
        const ledger = new Ledger(db.pool, db.schema);
        const pausedAt = Date.now();
        const until = Math.ceil((pausedAt + 6000) / 1000) * 1000;
        await ledger.fires.pause('job-0', { reason: 'maintenance window', by: 'admin (test)', until: new Date(until) });
        await sleep(until - 2000 - Date.now());
        first.signal('SIGKILL'); // 2 s before the expiry; the next leader is elected after the TTL, past it
        await waitForLeader(replicas, 25_000, [first]);
        await sleep(Math.max(0, until + 8000 - Date.now()));
        const t1 = Math.floor((Date.now() - 2000) / 1000) * 1000;
        const survivors = replicas.filter((r) => r !== first);
        const runs = await settle(db, survivors, t1);

        const t0 = Math.min(...runs.map((r) => r.at));
        for (const job of ['job-0', 'job-1']) {
          const mine = ofJob(runs, job);
          assert.deepEqual(
            mine.map((r) => r.at),
            seconds(t0, t1),
            `${job}: one run per slot, none missing, none twice`,
          );
        }
        const paused = ofJob(runs, 'job-0');
        const before = paused.filter((r) => r.at > pausedAt + 1000 && r.at < until);
        const after = paused.filter((r) => r.at >= until);
        assert.ok(before.length >= 3, `slots inside the pause: ${before.length}`);
        for (const r of before) {
          assert.equal(r.state, 'skipped', `${new Date(r.at).toISOString()} inside the pause`);
          assert.match(r.error ?? '', /job is paused by admin \(test\) until .*: maintenance window/);
          assert.equal(r.effects, 0);
        }
        assert.equal(after[0]!.at, until, 'the slot at until itself fires');
        for (const r of after) assert.deepEqual([r.state, r.effects], ['completed', 1], new Date(r.at).toISOString());
        for (const r of ofJob(runs, 'job-1')) assert.deepEqual([r.state, r.effects], ['completed', 1]);
        const tokens = new Set(runs.map((r) => r.token));
        assert.ok(tokens.size >= 2, 'two leaders committed');

        const lifts = replicas.flatMap((r) => [...r.events].filter((e) => e.event === 'pause-expired'));
        assert.deepEqual(
          lifts.map((e) => e.job),
          ['job-0'],
          'the pause is lifted exactly once across replicas',
        );
        assert.equal((await ledger.fires.pauses()).has('job-0'), false);
        console.log(`pause expiry failover: ${before.length} slots skipped, ${after.length} fired after until`);
      } finally {
        for (const r of replicas) r.signal('SIGKILL');
        await Promise.all(replicas.map((r) => r.exited));
        await db.drop();
      }
    },
  );

  it(
    'maxCatchUp 1 over a failover: at most the newest late slot fires, older ones missed, every other slot once',
    { timeout: 120_000 },
    async () => {
      // A 5 s TTL: the outage spans at least ~4 slots, more than the on-time one and the cap of 1.
      // Stand-ins off: they would commit the outage's slots on time, leaving nothing to catch up.
      const { db, replicas } = await cluster({ maxCatchUp: 1 }, 5000, 0);
      try {
        const first = await waitForLeader(replicas, 60_000);
        await sleep(4000);
        first.signal('SIGKILL');
        const second = await waitForLeader(replicas, 25_000, [first]);
        await sleep(6000);
        const t1 = Math.floor((Date.now() - 2000) / 1000) * 1000;
        const survivors = replicas.filter((r) => r !== first);
        const runs = await settle(db, survivors, t1);
        const catchUpEvents = [...second.events].filter((e) => e.event === 'catchup');
        const ledger = new Ledger(db.pool, db.schema);
        for (const job of ['job-0', 'job-1']) {
          const mine = ofJob(runs, job);
          const byToken = [...new Set(mine.map((r) => r.token))];
          assert.ok(byToken.length >= 2, `${job}: committed by two leaders`);
          const lastOfFirst = Math.max(...mine.filter((r) => r.token === byToken[0]).map((r) => r.at));
          // The new leader's reconciliation: its 'catchup' runs before its first fire on schedule.
          const secondTenure = mine.filter((r) => r.token === byToken[1]);
          const firstOnSchedule = Math.min(...secondTenure.filter((r) => r.trigger === 'schedule').map((r) => r.at));
          const caught = secondTenure.filter((r) => r.trigger === 'catchup' && r.at < firstOnSchedule);
          const firstCaught = Math.min(...caught.map((r) => r.at));
          const have = new Set(mine.map((r) => r.at));
          const missing = seconds(mine[0]!.at, t1).filter((t) => !have.has(t));
          // The outage's slots: missed ones first, then at most 1 late + the on-time one(s) fired.
          assert.ok(missing.length >= 1, `${job}: the cap left slots missed (outage ${firstCaught - lastOfFirst} ms)`);
          for (const t of missing)
            assert.ok(t > lastOfFirst && t < firstCaught, `${job}: only the oldest slots are missed`);
          assert.deepEqual(
            [...missing, ...caught.map((r) => r.at)].sort((a, b) => a - b),
            seconds(lastOfFirst + 1000, Math.max(...caught.map((r) => r.at))),
            `${job}: each outage slot is fired or missed, never both`,
          );
          // Late by more than the grace when the new leader planned: at most maxCatchUp of them.
          const late = catchUpEvents.filter((e) => e.job === job && e.t - Date.parse(String(e.scheduledAt)) > 2500);
          assert.ok(late.length <= 1, `${job}: ${late.length} late slots fired, cap 1`);
          for (const r of mine)
            assert.deepEqual([r.state, r.effects], ['completed', 1], `${job} ${new Date(r.at).toISOString()}`);
          // cronwarden explain answers each of them: one stored range naming maxCatchUp and the new tenure.
          const occ = await readOccurrences(db.pool, ledger.tables, {
            job,
            from: new Date(mine[0]!.at),
            to: new Date(t1),
            now: new Date(),
          });
          const missedEntries = occ.entries.filter((e) => e.outcome === 'missed');
          assert.deepEqual(
            missedEntries.map((e) => [e.count, e.missed!.reason, e.missed!.leaderToken, e.missed!.outageStartMs]),
            [[missing.length, 'max-catch-up', byToken[1], lastOfFirst]],
            `${job}: ${JSON.stringify(occ.entries)}`,
          );
          assert.ok(!occ.entries.some((e) => e.outcome === 'unanswered' || e.outcome === 'not-accounted'));
          console.log(`catch-up cap failover ${job}: ${missing.length} missed, ${caught.length} caught up`);
        }
      } finally {
        for (const r of replicas) r.signal('SIGKILL');
        await Promise.all(replicas.map((r) => r.exited));
        await db.drop();
      }
    },
  );
});
