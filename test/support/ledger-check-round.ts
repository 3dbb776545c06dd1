/**
 * The live ledger check as the leader's chore builds it (scheduler/chores/ledger-checks.ts), over a
 * test's real ledger: the settings a test cares about given, the rest the tests' usual ones.
 */
import { pino, type Logger } from 'pino';
import { systemClock } from '../../src/clock.js';
import type { Ledger } from '../../src/ledger/ledger.js';
import { saveLedgerCheck } from '../../src/ledger/ledger-check.js';
import { ledgerChecks, type LedgerChecksOptions } from '../../src/scheduler/chores/ledger-checks.js';
import { LedgerCheckChore } from '../../src/scheduler/chores/ledger-check.js';

export function testLedgerCheck(
  ledger: Ledger,
  o: Partial<Omit<LedgerChecksOptions, 'ledger'>> & {
    /** Keep each report in the ledger, as the leader does (default); false: keep none. */
    keep?: boolean;
    logger?: Logger;
  } = {},
): LedgerCheckChore {
  const { keep = true, logger = pino({ level: 'silent' }), ...settings } = o;
  return new LedgerCheckChore({
    checks: ledgerChecks({
      ledger,
      now: () => Date.now(),
      windowMs: 600_000,
      maxRows: 100_000,
      shards: 1,
      workerLockMs: 1000,
      claimerLiveWithinMs: () => 1000,
      timeouts: () => [],
      ...settings,
    }),
    save: keep ? (report) => saveLedgerCheck(ledger.pool, ledger.tables, report) : async () => {},
    clock: systemClock,
    logger,
  });
}
