/**
 * The ledger in PostgreSQL, the truth of what fired and what ran. Two sides: the leader's fires
 * (fire-ledger.ts, one module per operation behind it) and the workers' claims and outcomes
 * (run-ledger.ts); reads for the admin API, metrics and drills live beside them. Nothing outside
 * src/ledger writes SQL on cronwarden's tables.
 */
import type pg from 'pg';
import { NamespaceMismatchError, NotMigratedError } from '../errors.js';
import { tablesIn, type Tables } from '../db/tables.js';
import { FireLedger } from './fire-ledger.js';
import { RunLedger } from './run-ledger.js';
import { ScheduleLedger } from './schedule-ledger.js';
import { WorkflowLedger } from './workflow-ledger.js';

export class Ledger {
  readonly fires: FireLedger;
  readonly runs: RunLedger;
  /** Runtime schedules and their versions. */
  readonly schedules: ScheduleLedger;
  /** Workflow runs: start, step completions, failures, cancel, retry, signals. */
  readonly workflows: WorkflowLedger;
  /** cronwarden's tables in this deployment's schema (src/db/tables.ts). */
  readonly tables: Tables;
  private identityValue: Promise<string> | undefined;

  /** `schema`: where this deployment's tables live (default "cronwarden"; see src/db/tables.ts). */
  constructor(
    readonly pool: pg.Pool,
    schema?: string,
  ) {
    this.tables = tablesIn(schema);
    this.fires = new FireLedger(pool, this.tables);
    this.runs = new RunLedger(pool, this.tables);
    this.schedules = new ScheduleLedger(pool, this.tables);
    this.workflows = new WorkflowLedger(pool, this.tables);
  }

  /**
   * The replica's lease TTL: a worker silent this long is taken for dead (its runs go to others),
   * and a transaction holding the scheduler's fence or a workflow run's lock is ended after sitting
   * idle this long, so a frozen replica cannot keep the next leader waiting on the fence row
   * (transaction.ts), nor the other replicas' step completions on the workflow run's row.
   */
  useLeaseTtl(ms: number): void {
    this.runs.claimerLiveWithinMs = ms;
    this.fires.fenceIdleLimitMs = ms;
    this.schedules.fenceIdleLimitMs = ms;
    this.workflows.lockHoldMs = ms;
  }

  get schema(): string {
    return this.tables.schema;
  }

  /** This ledger's random identity (cw_ledger), made by the migration that created it. */
  identity(): Promise<string> {
    this.identityValue ??= this.pool
      .query<{ id: string }>(`SELECT id FROM ${this.tables.ledger} ORDER BY created_at LIMIT 1`)
      .then(
        (r) => {
          const id = r.rows[0]?.id;
          if (!id) throw new NotMigratedError(`${this.schema}.cw_ledger has no row`);
          return id;
        },
        (err: { code?: string }) => {
          if (err.code === '42P01') throw new NotMigratedError(`schema "${this.schema}" has no cw_ledger`);
          throw err;
        },
      );
    this.identityValue.catch(() => (this.identityValue = undefined));
    return this.identityValue;
  }

  /**
   * Bind this schema to `namespace`: the first replica records it, every later one must match.
   * Two deployments pointed at one schema (the same --schema, or namespaces that map to one
   * schema name) would share runs, fences and pause flags, so the second is refused instead.
   */
  async bindNamespace(namespace: string): Promise<void> {
    let res;
    try {
      res = await this.pool.query<{ namespace: string }>(
        `WITH claimed AS (UPDATE ${this.tables.ledger} SET namespace = $1 WHERE namespace IS NULL RETURNING namespace)
         SELECT namespace FROM claimed UNION ALL SELECT namespace FROM ${this.tables.ledger} WHERE namespace IS NOT NULL`,
        [namespace],
      );
    } catch (err) {
      if ((err as { code?: string }).code === '42P01' || (err as { code?: string }).code === '42703') {
        throw new NotMigratedError(`schema "${this.schema}" has no current cw_ledger`);
      }
      throw err;
    }
    // Replicas starting together race for the claim: the loser's UPDATE waits for the winner and
    // then matches nothing, while its SELECT still sees the statement's snapshot from before the
    // winner committed. A second statement takes a new snapshot and reads what the winner wrote.
    const bound =
      res.rows[0]?.namespace ??
      (await this.pool.query<{ namespace: string | null }>(`SELECT namespace FROM ${this.tables.ledger} LIMIT 1`))
        .rows[0]?.namespace ??
      undefined;
    if (bound === undefined) throw new NotMigratedError(`${this.schema}.cw_ledger has no row`);
    if (bound !== namespace) throw new NamespaceMismatchError(this.schema, bound, namespace);
  }

  /** Resolves once the ledger's pool can run a query (readiness). */
  async ping(): Promise<void> {
    await this.pool.query('SELECT 1');
  }

  /** The database server's clock, epoch ms: the time every replica schedules against. */
  async serverTime(): Promise<number> {
    const res = await this.pool.query<{ t: number }>(
      'SELECT (extract(epoch FROM clock_timestamp()) * 1000)::float8 AS t',
    );
    const row = res.rows[0];
    if (!row) throw new NotMigratedError('the clock query returned no row');
    return row.t;
  }
}

export type { Claim, ClaimResult, Outcome, TransactionResult } from './run-ledger.js';
export type { Queryable } from './transaction.js';
export type { JobPause, PauseRequest } from './pauses.js';
export { pauseHolds } from './pauses.js';
export { FireLedger, RunLedger };
