/** The ledger contract on the real Ledger, against a scratch PostgreSQL database. */
import { Ledger } from '../../src/ledger/ledger.js';
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
});
