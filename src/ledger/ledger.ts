/**
 * The ledger in PostgreSQL, the truth of what fired and what ran. Two sides, one file each: the
 * leader's fires (fire-ledger.ts) and the workers' claims and outcomes (run-ledger.ts); reads for
 * the admin API, metrics and drills live beside them. Nothing outside src/ledger writes SQL on
 * cronwarden's tables.
 */
import type pg from 'pg';
import { NotMigratedError } from '../errors.js';
import { FireLedger } from './fire-ledger.js';
import { RunLedger } from './run-ledger.js';

export class Ledger {
  readonly fires: FireLedger;
  readonly runs: RunLedger;
  private identityValue: Promise<string> | undefined;

  constructor(readonly pool: pg.Pool) {
    this.fires = new FireLedger(pool);
    this.runs = new RunLedger(pool);
  }

  /** This ledger's random identity (cw_ledger), made by the migration that created it. */
  identity(): Promise<string> {
    this.identityValue ??= this.pool.query<{ id: string }>('SELECT id FROM cw_ledger ORDER BY created_at LIMIT 1').then((r) => {
      const id = r.rows[0]?.id;
      if (!id) throw new NotMigratedError('cw_ledger has no row');
      return id;
    });
    this.identityValue.catch(() => (this.identityValue = undefined));
    return this.identityValue;
  }

  /** The database server's clock, epoch ms: the time every replica schedules against. */
  async serverTime(): Promise<number> {
    const res = await this.pool.query<{ t: number }>('SELECT (extract(epoch FROM clock_timestamp()) * 1000)::float8 AS t');
    const row = res.rows[0];
    if (!row) throw new NotMigratedError('the clock query returned no row');
    return row.t;
  }
}

export type { CommittedFire, FireBatchResult, FireRequest, FireTrigger, LeaderStamp } from './fire-ledger.js';
export type { Claim, ClaimResult, Outcome, TransactionResult } from './run-ledger.js';
export type { Queryable } from './transaction.js';
export { FireLedger, RunLedger };
