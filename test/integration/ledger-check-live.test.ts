/**
 * The live ledger check on a running cluster: three replica processes running jobs due every
 * second, the check every second on the leader. Healthy, its reports (kept in the ledger) count 0
 * on every check over a window that holds the cluster's runs; a fire then written past the fence
 * with an older leader token (a stale leader whose fencing is broken, as raw SQL) is reported by
 * the next round as a token out of order, and the report names it.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { lastLedgerCheck } from '../../src/ledger/ledger-check.js';
import { tablesIn } from '../../src/db/tables.js';
import type { LedgerCheckReport } from '../../src/scheduler/chores/ledger-check.js';
import { createTestDatabase, type TestDatabase } from '../support/postgres-database.js';
import { createEffectsTable, replicaProcesses, waitForLeader, type ReplicaChild } from '../support/replica-cluster.js';
import { SHARED_REDIS_URL } from './failover-scenario.js';

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

describe('live ledger check on three replicas (PostgreSQL lease, real processes)', () => {
  let db: TestDatabase;
  let replicas: ReplicaChild[];

  before(async () => {
    db = await createTestDatabase();
    await createEffectsTable(db);
    replicas = replicaProcesses(db, {
      namespace: `lc${randomUUID().slice(0, 8)}`,
      redisUrl: SHARED_REDIS_URL,
      jobs: 3,
      ttlMs: 2000,
      ledgerCheck: { intervalMs: 1000 },
    });
  });
  after(async () => {
    for (const r of replicas) r.signal('SIGTERM');
    await Promise.all(replicas.map((r) => r.exited));
    await db.drop();
  });

  /** The first report written after `since` (database clock) that satisfies `done`; polls up to 30 s. */
  async function reportAfter(since: Date, done: (r: LedgerCheckReport) => boolean): Promise<LedgerCheckReport> {
    const deadline = Date.now() + 30_000;
    let last: LedgerCheckReport | undefined;
    while (Date.now() < deadline) {
      const kept = await lastLedgerCheck(db.pool, tablesIn(db.schema));
      if (kept && kept.checkedAt > since) {
        last = kept.report as LedgerCheckReport;
        if (done(last)) return last;
      }
      await sleep(250);
    }
    throw new Error(`no such report within 30 s; last: ${JSON.stringify(last)}`);
  }
  const now = async () => (await db.pool.query<{ t: Date }>('SELECT now() AS t')).rows[0]!.t;

  it('a healthy cluster reports 0 on every check', { timeout: 90_000 }, async () => {
    await waitForLeader(replicas, 30_000);
    // Runs flowing and completing on the replicas' workers.
    const deadline = Date.now() + 30_000;
    for (;;) {
      const n = await db.pool.query<{ n: number }>("SELECT count(*)::int AS n FROM cw_runs WHERE state = 'completed'");
      if (n.rows[0]!.n >= 30) break;
      assert.ok(Date.now() < deadline, 'runs completed within 30 s');
      await sleep(250);
    }
    // A round after those runs: the chore's rounds read the window's runs bit by bit, every second.
    const report = await reportAfter(await now(), () => true);
    assert.deepEqual(report.counts, {
      'duplicate-slots': 0,
      'token-order': 0,
      unsettled: 0,
      'workflow-order': 0,
      'lost-writes': 0,
      'unanswered-instants': 0,
    });
    assert.equal(report.violations, 0);
    assert.deepEqual(report.examples, {});
    assert.equal(report.window?.capped, false);
  });

  it(
    'a fire written past the fence with an older leader token is reported by the next round',
    { timeout: 60_000 },
    async () => {
      const top = await db.pool.query<{ t: string }>('SELECT max(leader_token)::text AS t FROM cw_runs');
      const stale = BigInt(top.rows[0]!.t) - 1n;
      // An instant no replica fires (a day ago, before the cluster existed), under a token below the leader's.
      const ins = await db.pool.query<{ id: string }>(
        `INSERT INTO cw_runs (job, scheduled_at, trigger, leader_token, leader_id)
       VALUES ('job-0', date_trunc('second', now()) - interval '1 day', 'schedule', $1, 'stale-leader') RETURNING id`,
        [stale.toString()],
      );
      const report = await reportAfter(await now(), (r) => r.counts['token-order']! > 0);
      assert.equal(report.counts['token-order'], 1);
      assert.equal(report.counts['duplicate-slots'], 0);
      assert.match(
        report.examples['token-order']![0]!,
        new RegExp(
          `^I3: job-0: run ${ins.rows[0]!.id} committed with leader token ${stale} after token ${stale + 1n}$`,
        ),
      );
    },
  );
});
