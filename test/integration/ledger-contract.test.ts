/** The ledger contract on the real Ledger, against a scratch PostgreSQL database. */
import assert from 'node:assert/strict';
import { tablesIn } from '../../src/db/tables.js';
import { attemptsOf } from '../../src/ledger/attempt-rows.js';
import { Ledger } from '../../src/ledger/ledger.js';
import { ACTIVE_SQL } from '../../src/ledger/run-states.js';
import { ledgerContract } from '../support/ledger-contract.js';
import { createTestDatabase, type TestDatabase } from '../support/postgres-database.js';

let db: TestDatabase | undefined;

ledgerContract('PostgreSQL', {
  async open() {
    db = await createTestDatabase();
    const pool = db.pool;
    await pool.query(
      'CREATE TABLE contract_effects (id bigserial PRIMARY KEY, run_id bigint NOT NULL, note text NOT NULL)',
    );
    const ledger = new Ledger(pool);
    return {
      fires: ledger.fires,
      runs: ledger.runs,
      async effects(runId) {
        const res = await pool.query<{ note: string }>(
          'SELECT note FROM contract_effects WHERE run_id = $1 ORDER BY id',
          [runId.toString()],
        );
        return res.rows.map((r) => r.note);
      },
      async view(runId) {
        const run = await pool.query<{
          state: string;
          attempts: number;
          skipped_attempts: number;
          completed_attempt: number | null;
          error: string | null;
        }>('SELECT state, attempts, skipped_attempts, completed_attempt, error FROM cw_runs WHERE id = $1', [
          runId.toString(),
        ]);
        const row = run.rows[0];
        if (!row) return null;
        // The attempts as the ledger shows them: the ended ones' rows and the running one (the run's row).
        const attempts = await pool.query<{ attempt: number; state: string; error: string | null }>(
          `SELECT a.attempt, a.state, a.error FROM cw_runs r, LATERAL (${attemptsOf(tablesIn(), 'r')}) a
           WHERE r.id = $1 ORDER BY a.attempt`,
          [runId.toString()],
        );
        return {
          state: row.state,
          attempts: row.attempts,
          skippedAttempts: row.skipped_attempts,
          completedAttempt: row.completed_attempt,
          error: row.error,
          attemptRows: attempts.rows,
        };
      },
    };
  },
  async close() {
    await db?.drop();
  },
  invariants: {
    // What the queries of unfinished runs rely on (openRunsOf in src/ledger/run-states.ts).
    async 'a run is active exactly when its finished_at is NULL'() {
      const res = await db!.pool.query<{ id: string; state: string; finished_at: Date | null }>(
        `SELECT id::text, state, finished_at FROM cw_runs WHERE (finished_at IS NULL) <> (state IN ${ACTIVE_SQL})`,
      );
      assert.deepEqual(res.rows, []);
      const all = await db!.pool.query<{ n: number }>('SELECT count(DISTINCT state)::int AS n FROM cw_runs');
      assert.ok(all.rows[0]!.n >= 5, `the scenarios left runs in ${all.rows[0]!.n} states`);
    },
    // Attempt rows are written when the attempt ends (src/ledger/attempt-rows.ts): none says
    // 'running', and every run off its newest claim has that claim's row.
    async 'every ended attempt has its row, written once it ended'() {
      const running = await db!.pool.query<{ n: number }>(
        "SELECT count(*)::int AS n FROM cw_run_attempts WHERE state = 'running'",
      );
      assert.equal(running.rows[0]!.n, 0);
      const missing = await db!.pool.query<{ id: string; state: string; attempts: number }>(
        `SELECT r.id::text, r.state, r.attempts FROM cw_runs r
         WHERE r.attempts > 0 AND r.state <> 'running'
           AND NOT EXISTS (SELECT 1 FROM cw_run_attempts a WHERE a.run_id = r.id AND a.attempt = r.attempts)`,
      );
      assert.deepEqual(missing.rows, []);
    },
    // The triggers of migration 0019 keep cw_open_runs to the unfinished runs, through every
    // scenario's inserts, completions, retries, cancellations and supersessions.
    async 'cw_open_runs holds exactly the unfinished runs, each under its job'() {
      const res = await db!.pool.query<{ run_id: string; job: string | null; open_job: string | null }>(
        `SELECT COALESCE(r.id, o.run_id)::text AS run_id, r.job, o.job AS open_job
         FROM (SELECT id, job FROM cw_runs WHERE finished_at IS NULL) r FULL JOIN cw_open_runs o ON o.run_id = r.id
         WHERE r.id IS NULL OR o.run_id IS NULL OR r.job <> o.job`,
      );
      assert.deepEqual(res.rows, []);
      const open = await db!.pool.query<{ n: number }>('SELECT count(*)::int AS n FROM cw_open_runs');
      const finished = await db!.pool.query<{ n: number }>(
        'SELECT count(*)::int AS n FROM cw_runs WHERE finished_at IS NOT NULL',
      );
      assert.ok(open.rows[0]!.n > 0 && finished.rows[0]!.n > 0, 'the scenarios left runs both open and finished');
    },
  },
});
