/** The ledger contract on the in-memory fakes the unit tests use (MemoryLedger + MemoryRunLedger). */
import { ledgerContract } from '../support/ledger-contract.js';
import { MemoryLedger } from '../support/memory-ledger.js';
import { MemoryRunLedger } from '../support/memory-run-ledger.js';

ledgerContract('in-memory fakes', {
  async open() {
    const fires = new MemoryLedger();
    const runs = new MemoryRunLedger(fires);
    return {
      fires,
      runs,
      async effects(runId) {
        return runs.effects.filter((s) => s.values[0] === runId.toString()).map((s) => String(s.values[1]));
      },
      async view(runId) {
        const run = fires.runs.find((r) => r.id === runId);
        const book = runs.bookOf(runId);
        if (!run || !book) return null;
        return {
          state: run.state,
          attempts: book.attempts,
          skippedAttempts: book.skippedAttempts,
          completedAttempt: book.completedAttempt,
          error: run.error ?? null,
          attemptRows: book.attemptRows.map((a) => ({ attempt: a.attempt, state: a.state, error: a.error })),
        };
      },
    };
  },
});
