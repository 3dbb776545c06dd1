/**
 * The live ledger check (scheduler/chores/ledger-check.ts), run by the drill over its own window
 * while the replicas still run (their member rows carry the claims the ledger lost), so a drill
 * shows what the always-on check would have reported beside its own checker's verdict: nothing on
 * a healthy drill, something on each run that breaks an assumption on purpose (--ledger-async).
 */
import type pg from 'pg';
import { pino } from 'pino';
import { systemClock } from '../clock.js';
import type { Tables } from '../db/tables.js';
import { replicaSettings } from '../replica/replica-defaults.js';
import { ledgerChecks } from '../scheduler/chores/ledger-checks.js';
import { LedgerCheckChore, type LedgerCheckReport } from '../scheduler/chores/ledger-check.js';

export async function liveLedgerCheck(
  pool: pg.Pool,
  tables: Tables,
  o: { since: number; shards: number; ttlMs: number },
): Promise<LedgerCheckReport> {
  const chore = new LedgerCheckChore({
    checks: ledgerChecks({
      ledger: { pool, tables },
      // The whole drill, and the minute before it (the warm-up's fires).
      windowMs: Date.now() - o.since + 60_000,
      maxRows: replicaSettings.ledgerCheckMaxRows.max,
      shards: o.shards,
      // The replicas' own settings (fleet.ts): their worker lock, the default sweep, the drill's TTL.
      workerLockMs: Math.max(1000, o.ttlMs),
      claimerLiveWithinMs: () => o.ttlMs,
      timeouts: () => [],
      now: () => Date.now(),
    }),
    // The drill's report carries it; the ledger keeps the replicas' own.
    save: async () => {},
    clock: systemClock,
    logger: pino({ level: 'silent' }),
  });
  return chore.checkOnce();
}

/** One line of the drill's log: the counts, and the first example of each check that found something. */
export function describeLiveCheck(r: LedgerCheckReport): string {
  const counts = Object.entries(r.counts)
    .map(([check, n]) => `${check} ${n}`)
    .join(', ');
  const firsts = Object.values(r.examples).map((e) => e[0]);
  return `live ledger check over ${r.window?.runs ?? 0} runs: ${counts}${firsts.length ? `; ${firsts.join('; ')}` : ''}`;
}
