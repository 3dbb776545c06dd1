/**
 * Workers' liveness: each worker beats its cw_workers row a few times per liveness window. A run
 * running for a worker whose row did not beat within the window (killed, frozen, partitioned from
 * the ledger) is an orphan: any live worker may claim it, under a newer token (run-claims.ts).
 */
import type { Tables } from '../db/tables.js';
import { namedStatement, perSchema } from './named-statement.js';
import type pg from 'pg';
import { sqlInt, sqlText, type Queryable } from './transaction.js';
import { queryByKey, sqlPrepared } from './sql-prepared.js';

/** SQL: the claimer of run `r` beat within `window` ms (a placeholder naming the window). */
export function claimerAlive(t: Tables, window: string): string {
  return `EXISTS (SELECT 1 FROM ${t.workers} w
    WHERE w.worker = r.claimed_by AND w.beat_at > now() - ${window}::bigint * interval '1 millisecond')`;
}

/**
 * SQL: the running runs whose claimer meets `claimer` (a condition on `r.claimed_by`), as FROM item
 * `r` (id, claim_token, claimed_by): from the open runs to each run by its id, so a plan made while
 * cw_runs was small still finds each by key.
 */
function runningRuns(t: Tables, claimer: string): string {
  return `${t.openRuns} o
     CROSS JOIN LATERAL (SELECT r.id, r.claim_token, r.claimed_by FROM ${t.runs} r
       WHERE r.id = o.run_id AND r.state = 'running' AND ${claimer} LIMIT 1) r`;
}

const statements = perSchema((t) => ({
  /** Worker $1 is alive now (on the ledger's clock). */
  beat: namedStatement(
    'beat_worker',
    `INSERT INTO ${t.workers} AS w (worker) VALUES ($1) ON CONFLICT (worker) DO UPDATE SET beat_at = now()`,
  ),
  /** Worker $1 stopped. */
  forget: namedStatement('forget_worker', `DELETE FROM ${t.workers} WHERE worker = $1`),
  /**
   * Up to $3 runs running for a worker other than $1 that did not beat within $2 ms, oldest claims
   * first. From the open runs to each run by its id, planned by key (sql-prepared.ts): prepared as
   * a join, the plan made while cw_runs was small scanned the whole table at every beat until an
   * ANALYZE (measured on a replica whose ledger grew by 120,000 runs: 70 ms a beat).
   */
  orphans: sqlPrepared(
    'orphaned_runs',
    ['text', 'bigint', 'int'],
    `SELECT r.id FROM ${runningRuns(t, 'r.claimed_by IS NOT NULL AND r.claimed_by <> $1')}
     WHERE NOT ${claimerAlive(t, '$2')}
     ORDER BY r.claim_token LIMIT $3`,
  ),
  /**
   * The runs running for worker $1, oldest claims first: at its start, an earlier start's (the
   * process was killed and started again under its name before its window ran out, so its row
   * never stopped beating). Planned by key, as orphans.
   */
  claimedBy: sqlPrepared(
    'runs_claimed_by',
    ['text'],
    `SELECT r.id FROM ${runningRuns(t, 'r.claimed_by = $1')} ORDER BY r.claim_token`,
  ),
}));

/** Beat `worker`'s row now. */
export async function beatWorker(db: Queryable, t: Tables, worker: string): Promise<void> {
  await db.query({ ...statements(t).beat, values: [worker] });
}

/** A worker that stops cleanly removes its row: whatever it still holds is an orphan at once. */
export async function forgetWorker(db: Queryable, t: Tables, worker: string): Promise<void> {
  await db.query({ ...statements(t).forget, values: [worker] });
}

/** Runs running for a worker other than `worker` that is not alive, oldest claims first. */
export async function orphanedRuns(
  pool: pg.Pool,
  t: Tables,
  o: { worker: string; liveWithinMs: number; limit: number },
): Promise<bigint[]> {
  const res = await queryByKey(pool, statements(t).orphans, [
    sqlText(o.worker),
    sqlInt(Math.max(0, Math.floor(o.liveWithinMs))),
    sqlInt(o.limit),
  ]);
  return (res.rows as { id: string }[]).map((r) => BigInt(r.id));
}

/** The runs running for `worker`, oldest claims first (see the claimedBy statement). */
export async function runsClaimedBy(pool: pg.Pool, t: Tables, worker: string): Promise<bigint[]> {
  const res = await queryByKey(pool, statements(t).claimedBy, [sqlText(worker)]);
  return (res.rows as { id: string }[]).map((r) => BigInt(r.id));
}
