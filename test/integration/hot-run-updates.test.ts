/**
 * A claim and a completion rewrite only the run's row (HOT updates, real PostgreSQL): no index of
 * cw_runs names a column they change, so neither writes an entry into each of its ten indexes,
 * and each run's page keeps room for both new versions (fillfactor 25, migration 0023).
 * Counted from PostgreSQL's own statistics for the table, on the one connection that did the work.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import pg from 'pg';
import { tablesIn } from '../../src/db/tables.js';
import { workflowRunsFinishedSince } from '../../src/ledger/admin-reads.js';
import { Ledger } from '../../src/ledger/ledger.js';
import type { Claim } from '../../src/ledger/run-ledger.js';
import { claimAll } from '../support/claimed-runs.js';
import { createTestDatabase, type TestDatabase } from '../support/postgres-database.js';

describe('HOT updates of cw_runs (real PostgreSQL)', () => {
  let db: TestDatabase;
  let pool: pg.Pool;
  let ledger: Ledger;
  const stamp = { fenceResource: 'scheduler/hot', token: 1n, replicaId: 'test', stillLeading: () => true };

  before(async () => {
    db = await createTestDatabase();
    pool = new pg.Pool({ connectionString: db.url, max: 1 });
    ledger = new Ledger(pool, db.schema);
  });
  after(async () => {
    await pool.end();
    await db.drop();
  });

  /** cw_runs' updated and HOT-updated row counts, this connection's figures flushed first. */
  const updates = async (): Promise<{ all: number; hot: number }> => {
    await pool.query('SELECT pg_stat_force_next_flush()');
    const res = await pool.query<{ all: string; hot: string }>(
      `SELECT n_tup_upd AS all, n_tup_hot_upd AS hot FROM pg_stat_user_tables WHERE relid = $1::regclass`,
      [`"${db.schema}".cw_runs`],
    );
    return { all: Number(res.rows[0]!.all), hot: Number(res.rows[0]!.hot) };
  };

  /** Fire `count` slots of `job`, a second apart from `at`: their run ids. */
  const fire = async (job: string, count: number, at: number): Promise<bigint[]> =>
    (
      await ledger.fires.commitFires(
        Array.from({ length: count }, (_, i) => ({
          job,
          scheduledAt: new Date(at + i * 1000),
          trigger: 'schedule' as const,
        })),
        stamp,
      )
    ).committed.map((f) => f.runId);
  const completeAll = (claims: Claim[]): Promise<boolean[]> =>
    ledger.runs.finishMany(
      claims.map((c) => ({ runId: c.runId, token: c.token, attempt: c.attempt, outcome: 'completed' as const })),
    );
  /** The ids of `job`'s runs in cw_open_runs, in order. */
  const openRunIds = async (job: string): Promise<string[]> =>
    (
      await pool.query<{ run_id: string }>(
        `SELECT run_id FROM "${db.schema}".cw_open_runs WHERE job = $1 ORDER BY run_id`,
        [job],
      )
    ).rows.map((r) => r.run_id);

  it('claims and completions of three runs are six HOT updates, and the runs leave cw_open_runs', async () => {
    const ids = await fire('hot', 3, Date.UTC(2026, 0, 1));
    assert.equal((await openRunIds('hot')).length, 3);
    const before = await updates();
    const claims = await claimAll(ledger, ids);
    assert.equal(claims.length, 3);
    assert.deepEqual(await completeAll(claims), [true, true, true]);
    const done = await updates();
    assert.equal(done.all - before.all, 6, 'three claims and three completions');
    assert.equal(done.hot - before.hot, 6, 'every one of them a HOT update');
    assert.equal((await openRunIds('hot')).length, 0);
  });

  it("a page keeps room for every run's claim and completion, even while a snapshot stops pruning (fillfactor 25)", async () => {
    // Pruning the versions a claim left dead needs a cleanup lock that other runs' claims and
    // finishes on the same page deny; an old snapshot denies it here, every time.
    const holder = new pg.Client({ connectionString: db.url });
    await holder.connect();
    await holder.query('BEGIN ISOLATION LEVEL REPEATABLE READ');
    await holder.query(`SELECT count(*) FROM "${db.schema}".cw_runs`);
    try {
      const ids = await fire('room', 100, Date.UTC(2026, 1, 1));
      const before = await updates();
      await completeAll(await claimAll(ledger, ids, 'a-replica-with-a-long-name-0123456789'));
      const done = await updates();
      assert.equal(done.all - before.all, 200, 'a hundred claims and a hundred completions');
      assert.equal(done.hot - before.hot, 200, 'every one of them a HOT update');
    } finally {
      await holder.query('ROLLBACK');
      await holder.end();
    }
  });

  it('outcomes close their runs in cw_open_runs themselves, the row trigger standing aside; other writers still go through it', async () => {
    await pool.query("SET track_functions = 'all'");
    const triggerCalls = async (): Promise<number> => {
      await pool.query('SELECT pg_stat_force_next_flush()');
      const res = await pool.query<{ n: number }>(
        `SELECT COALESCE(sum(calls), 0)::int AS n FROM pg_stat_user_functions
         WHERE schemaname = $1 AND funcname = 'cw_open_runs_after_update'`,
        [db.schema],
      );
      return res.rows[0]!.n;
    };
    const claims = await claimAll(ledger, await fire('closing', 4, Date.UTC(2026, 2, 1)));
    const before = await triggerCalls();
    const outcomes = ['completed', 'failed', 'retrying', 'cancelled'] as const;
    const accepted = await ledger.runs.finishMany(
      claims.map((c, i) => ({
        runId: c.runId,
        token: c.token,
        attempt: c.attempt,
        outcome: outcomes[i]!,
        ...(outcomes[i] === 'retrying' ? { retryInMs: 60_000 } : {}),
      })),
    );
    assert.deepEqual(accepted, [true, true, true, true]);
    const retrying = claims[2]!.runId.toString();
    assert.deepEqual(await openRunIds('closing'), [retrying], 'only the run waiting for its retry is still open');
    assert.equal((await triggerCalls()) - before, 0, 'the finish deleted the rows itself');
    // Another writer (an older replica, an operator's UPDATE): the trigger keeps the table.
    await pool.query(`UPDATE "${db.schema}".cw_runs SET state = 'cancelled', finished_at = now() WHERE id = $1`, [
      retrying,
    ]);
    assert.deepEqual(await openRunIds('closing'), []);
    assert.equal((await triggerCalls()) - before, 1);
  });

  it("the metrics read a workflow run's end from its derived column, and no job run's", async () => {
    const insert = async (job: string, kind: string) =>
      (
        await pool.query<{ id: string }>(
          `INSERT INTO "${db.schema}".cw_runs (job, scheduled_at, leader_token, leader_id, kind, state)
           VALUES ($1, now(), 1, 'test', $2, 'running') RETURNING id`,
          [job, kind],
        )
      ).rows[0]!.id;
    const workflowRun = await insert('nightly', 'workflow');
    const jobRun = await insert('plain', 'job');
    const since = new Date(Date.now() - 60_000);
    assert.deepEqual(await workflowRunsFinishedSince(pool, tablesIn(db.schema), since), []);
    await pool.query(
      `UPDATE "${db.schema}".cw_runs SET state = 'completed', finished_at = now() WHERE id = ANY($1::bigint[])`,
      [[workflowRun, jobRun]],
    );
    const ended = await workflowRunsFinishedSince(pool, tablesIn(db.schema), since);
    assert.deepEqual(
      ended.map((r) => [r.id, r.workflow, r.state]),
      [[workflowRun, 'nightly', 'completed']],
    );
  });
});
