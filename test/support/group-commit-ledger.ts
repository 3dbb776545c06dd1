/**
 * The group commit tests' ledger: a scratch database, a ledger on a pool of one connection (every
 * group meets what the one before it left on the connection), an effects table in the ledger's
 * schema, runs committed and claimed `n` at a time, and each run's effect written and counted.
 */
import { after, before } from 'node:test';
import pg from 'pg';
import { Ledger } from '../../src/ledger/ledger.js';
import type { Claim } from '../../src/ledger/run-ledger.js';
import { createTestDatabase, type TestDatabase } from './postgres-database.js';
import { claimedRuns } from './claimed-runs.js';

export interface GroupCommitLedger {
  readonly db: TestDatabase;
  readonly pool: pg.Pool;
  readonly ledger: Ledger;
  /** `n` runs of the suite's job, committed and claimed. */
  claim(n: number): Promise<Claim[]>;
  /** The run's effect: one row of the effects table, written on `tx`. */
  effect(tx: pg.PoolClient, c: Claim): Promise<unknown>;
  /** How many of `claims` have their effect. */
  effects(claims: Claim[]): Promise<number>;
}

/** Set up in `before` (then `more`, with the pool and schema) and dropped in `after` of the calling suite. */
export function groupCommitLedger(
  job: string,
  more?: (pool: pg.Pool, schema: string) => Promise<void>,
): GroupCommitLedger {
  const env = {} as { db: TestDatabase; pool: pg.Pool; ledger: Ledger; claim: (n: number) => Promise<Claim[]> };
  before(async () => {
    env.db = await createTestDatabase();
    env.pool = new pg.Pool({ connectionString: env.db.url, max: 1 });
    env.ledger = new Ledger(env.pool, env.db.schema);
    env.claim = claimedRuns(env.ledger, { job });
    await env.pool.query(`CREATE TABLE "${env.db.schema}".effects (run bigint PRIMARY KEY)`);
    await more?.(env.pool, env.db.schema);
  });
  after(async () => {
    await env.pool.end();
    await env.db.drop();
  });
  return {
    get db() {
      return env.db;
    },
    get pool() {
      return env.pool;
    },
    get ledger() {
      return env.ledger;
    },
    claim: (n) => env.claim(n),
    effect: (tx, c) => tx.query(`INSERT INTO "${env.db.schema}".effects (run) VALUES ($1)`, [c.runId.toString()]),
    effects: async (claims) =>
      (
        await env.pool.query<{ n: number }>(
          `SELECT count(*)::int AS n FROM "${env.db.schema}".effects WHERE run = ANY($1)`,
          [claims.map((c) => c.runId.toString())],
        )
      ).rows[0]!.n,
  };
}
