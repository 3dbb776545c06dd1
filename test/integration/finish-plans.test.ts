/**
 * The finishes find their attempt rows by the attempts' primary key however the table grew since
 * the connection first ran them (real PostgreSQL, plans read with auto_explain). A statement
 * prepared once per connection kept the plan made while cw_run_attempts was small: a sequential
 * scan of the whole table at every completion, growing with the table until an ANALYZE. The
 * group commit's statements are prepared, planned by key: they must not scan either.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import pg from 'pg';
import { Ledger } from '../../src/ledger/ledger.js';
import type { Claim } from '../../src/ledger/run-ledger.js';
import { createTestDatabase, type TestDatabase } from '../support/postgres-database.js';
import { claimedRuns } from '../support/claimed-runs.js';

describe('ledger statement plans after the tables grew (real PostgreSQL)', () => {
  let db: TestDatabase;
  let pool: pg.Pool;
  let ledger: Ledger;
  const plans: string[] = [];
  const stamp = { fenceResource: 'scheduler/plans', token: 1n, replicaId: 'test', stillLeading: () => true };
  let slot = Date.UTC(2026, 0, 1);
  let claim: (n: number) => Promise<Claim[]>;

  before(async () => {
    db = await createTestDatabase();
    // One connection, so every statement meets what that connection cached before.
    pool = new pg.Pool({ connectionString: db.url, max: 1 });
    pool.on('connect', (client) => {
      client.on('notice', (n) => plans.push(n.message ?? ''));
      void client.query(
        "LOAD 'auto_explain'; SET auto_explain.log_min_duration = 0; SET auto_explain.log_nested_statements = on; " +
          'SET client_min_messages = log',
      );
    });
    ledger = new Ledger(pool, db.schema);
    claim = claimedRuns(ledger, { job: 'plans' });
  });
  after(async () => {
    await pool.end();
    await db.drop();
  });

  const claimTen = (): Promise<Claim[]> => claim(10);
  const finishTen = async () => {
    const claims = await claimTen();
    const accepted = await ledger.runs.finishMany(
      claims.map((c) => ({ runId: c.runId, token: c.token, attempt: c.attempt, outcome: 'completed' as const })),
    );
    assert.deepEqual(accepted, Array(10).fill(true));
  };
  const completeTenInOneTransaction = async (o: { beforeGroup?: () => void } = {}) => {
    const claims = await claimTen();
    o.beforeGroup?.();
    const outcomes = await ledger.runs.completeGroupInTransaction(
      claims.map((claim) => ({ claim, fn: async () => 'done' })),
    );
    assert.ok(outcomes.every((o) => o.kind === 'done' && o.result.status === 'committed'));
  };
  /** The plan of the newest statement that updated cw_run_attempts (auto_explain logs it after it ran). */
  const attemptPlan = () => plans.filter((p) => /Update on cw_run_attempts/.test(p)).at(-1) ?? '';

  it('after the attempts table grew, a finish and a group completion still look their attempts up by key', async () => {
    // Enough calls while the table is small for a prepared statement to settle on a cached plan.
    for (let i = 0; i < 8; i++) {
      await finishTen();
      await completeTenInOneTransaction();
    }
    // The table grows: 30,000 attempt rows (a day of a busy job), no ANALYZE since.
    const [{ id } = { id: '' }] = (
      await pool.query<{ id: string }>(`SELECT min(id)::text AS id FROM "${db.schema}".cw_runs`)
    ).rows;
    await pool.query(
      `INSERT INTO "${db.schema}".cw_run_attempts (run_id, attempt, token, worker, state, finished_at)
       SELECT $1::bigint, g, g, 'w0', 'completed', now() FROM generate_series(100, 30099) g`,
      [id],
    );
    plans.length = 0;
    await finishTen();
    const finish = attemptPlan();
    assert.match(finish, /Update on cw_run_attempts/);
    assert.doesNotMatch(finish, /Seq Scan on cw_run_attempts/, finish);
    await completeTenInOneTransaction({ beforeGroup: () => (plans.length = 0) });
    const group = attemptPlan();
    assert.match(group, /Update on cw_run_attempts/);
    assert.doesNotMatch(group, /Seq Scan on cw_run_attempts/, group);
    // Nor does any statement of the group (its check, its completion, the triggers these fire) scan
    // a ledger table: they are prepared once and planned by key (sql-prepared.ts).
    for (const plan of plans) assert.doesNotMatch(plan, /Seq Scan on cw_/, plan);
    const check = plans.find((p) => /SELECT id, state, claim_token FROM/.test(p)) ?? '';
    assert.match(check, /Index Scan (using|on) cw_runs_pkey/, plans.join('\n'));
  });

  it('after cw_runs grew, a claim still finds its runs by key', async () => {
    // Claims while the table is small (the ones above, and these), then 30,000 more runs, no ANALYZE.
    for (let i = 0; i < 8; i++) await claimTen();
    await pool.query(
      `INSERT INTO "${db.schema}".cw_runs (job, scheduled_at, trigger, state, leader_token, leader_id)
       SELECT 'bulk', timestamptz '2020-01-01' + g * interval '1 second', 'schedule', 'completed', 1, 'x'
       FROM generate_series(1, 30000) g`,
    );
    const fires = Array.from({ length: 10 }, () => ({
      job: 'plans-claimed-here',
      scheduledAt: new Date((slot += 1000)),
      trigger: 'schedule' as const,
    }));
    const { committed } = await ledger.fires.commitFires(fires, stamp);
    plans.length = 0;
    const claimed = await ledger.runs.claimMany(
      committed.map((f) => f.runId),
      'w1',
    );
    assert.ok(claimed.every((r) => r.status === 'claimed'));
    const claim = plans.find((p) => /WITH wanted AS/.test(p)) ?? '';
    assert.match(claim, /Update on cw_runs/, plans.join('\n'));
    assert.doesNotMatch(claim, /Seq Scan on cw_/, claim);
  });

  it('after cw_runs grew, the outbox, the active runs of jobs and the orphan scan still find runs by key', async () => {
    let orphans: bigint[] = [];
    const periodic = async () => {
      await ledger.fires.unenqueued(100, ['plans', 'bulk']);
      await ledger.fires.activeJobs(['plans', 'bulk']);
      // w1 claimed runs above and never beat: its running runs are orphans to w2.
      orphans = await ledger.runs.orphans('w2', 5);
    };
    // Planned while the table is small (a prepared statement would cache that plan), then it grows.
    for (let i = 0; i < 8; i++) {
      await claimTen();
      await periodic();
    }
    await pool.query(
      `INSERT INTO "${db.schema}".cw_runs (job, scheduled_at, trigger, state, leader_token, leader_id)
       SELECT 'bulk', timestamptz '2021-01-01' + g * interval '1 second', 'schedule', 'completed', 1, 'x'
       FROM generate_series(1, 30000) g`,
    );
    plans.length = 0;
    await periodic();
    const outbox = plans.find((p) => /WITH released AS \(\s+SELECT h.run_id/.test(p)) ?? '';
    const active = plans.find((p) => /array_agg\(r.id::text\) AS ids/.test(p)) ?? '';
    const orphan = plans.find((p) => /r.claimed_by <> \$1/.test(p)) ?? '';
    assert.match(outbox, /cw_hand_overs/, plans.join('\n'));
    assert.match(active, /cw_open_runs/, plans.join('\n'));
    assert.match(orphan, /cw_open_runs/, plans.join('\n'));
    for (const plan of [outbox, active, orphan]) assert.doesNotMatch(plan, /Seq Scan on cw_runs/, plan);
    assert.equal(orphans.length, 5);
  });
});
