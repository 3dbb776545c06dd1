/** The ledger contract on the real Ledger, against a scratch PostgreSQL database. */
import assert from 'node:assert/strict';
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
        const attempts = await pool.query<{ attempt: number; state: string; error: string | null }>(
          'SELECT attempt, state, error FROM cw_run_attempts WHERE run_id = $1 ORDER BY attempt',
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
    // What the partial indexes of unfinished runs rely on (UNFINISHED in src/ledger/run-states.ts).
    async 'a run is active exactly when its finished_at is NULL'() {
      const res = await db!.pool.query<{ id: string; state: string; finished_at: Date | null }>(
        `SELECT id::text, state, finished_at FROM cw_runs WHERE (finished_at IS NULL) <> (state IN ${ACTIVE_SQL})`,
      );
      assert.deepEqual(res.rows, []);
      const all = await db!.pool.query<{ n: number }>('SELECT count(DISTINCT state)::int AS n FROM cw_runs');
      assert.ok(all.rows[0]!.n >= 5, `the scenarios left runs in ${all.rows[0]!.n} states`);
    },
  },
});
