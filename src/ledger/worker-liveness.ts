/**
 * Workers' liveness: each worker beats its cw_workers row a few times per liveness window. A run
 * running for a worker whose row did not beat within the window (killed, frozen, partitioned from
 * the ledger) is an orphan: any live worker may claim it, under a newer token (run-claims.ts).
 */
import type { Tables } from '../db/tables.js';
import type { Queryable } from './transaction.js';

/** Beat `worker`'s row now (on the ledger's clock). */
export async function beatWorker(db: Queryable, t: Tables, worker: string): Promise<void> {
  await db.query(
    `INSERT INTO ${t.workers} AS w (worker) VALUES ($1)
     ON CONFLICT (worker) DO UPDATE SET beat_at = now()`,
    [worker],
  );
}

/** A worker that stops cleanly removes its row: whatever it still holds is an orphan at once. */
export async function forgetWorker(db: Queryable, t: Tables, worker: string): Promise<void> {
  await db.query(`DELETE FROM ${t.workers} WHERE worker = $1`, [worker]);
}

/** SQL: the claimer of run `r` beat within `$window` ms (a placeholder naming the window). */
export function claimerAlive(t: Tables, window: string): string {
  return `EXISTS (SELECT 1 FROM ${t.workers} w
    WHERE w.worker = r.claimed_by AND w.beat_at > now() - ${window}::bigint * interval '1 millisecond')`;
}

/** Runs running for a worker other than `worker` that is not alive, oldest claims first. */
export async function orphanedRuns(
  db: Queryable,
  t: Tables,
  o: { worker: string; liveWithinMs: number; limit: number },
): Promise<bigint[]> {
  const res = await db.query<{ id: string }>(
    `SELECT r.id FROM ${t.runs} r
     WHERE r.state = 'running' AND r.claimed_by IS NOT NULL AND r.claimed_by <> $1
       AND NOT ${claimerAlive(t, '$2')}
     ORDER BY r.claim_token LIMIT $3`,
    [o.worker, Math.max(0, Math.floor(o.liveWithinMs)), o.limit],
  );
  return res.rows.map((r) => BigInt(r.id));
}
