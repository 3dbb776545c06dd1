/**
 * The re-delivery sweep's statements: a run handed to the queue that is still waiting for a worker
 * after a while is looked at again (the leader hands it over again if the queue lost it), so a run
 * the queue lost is never left pending with no one on it (I6). A running run is its worker's, and
 * once that worker stops beating any live worker takes it over (worker-liveness.ts).
 */
import type { Tables } from '../db/tables.js';
import { namedStatement, perSchema } from './named-statement.js';
import type { Queryable } from './transaction.js';
import { mayDeliverSql } from './run-limits.js';
import { openRunsOf } from './run-states.js';

/** A run the leader handed to the queue, as the re-delivery sweep sees it. */
export interface HandedOverRun {
  runId: bigint;
  job: string;
  scheduledAt: Date;
  state: string;
  /** Execution token of the newest claim; null if no worker ever claimed it. */
  claimToken: bigint | null;
}

const statements = perSchema((t) => ({
  /**
   * Up to $2 handed-over runs waiting for a worker (pending, or retrying past their backoff) and not
   * looked at for $1 ms, oldest first, marked as looked at; a run waiting for a concurrency slot
   * only once one is free for it (run-limits.ts). A run whose hand-over is unconfirmed (a
   * cw_hand_overs row) is the outbox's.
   */
  toCheck: namedStatement(
    'deliveries_to_check',
    `WITH due AS (
       SELECT r0.id FROM ${openRunsOf(t, 'r0')}
       WHERE r0.state IN ('pending', 'retrying') AND r0.enqueued_at IS NOT NULL AND ${mayDeliverSql(t, 'r0')}
         AND NOT EXISTS (SELECT 1 FROM ${t.handOvers} h WHERE h.run_id = r0.id)
         AND COALESCE(r0.delivery_checked_at, r0.enqueued_at) < now() - $1::bigint * interval '1 millisecond'
         AND (r0.available_at IS NULL OR r0.available_at < now() - $1::bigint * interval '1 millisecond')
       ORDER BY COALESCE(r0.delivery_checked_at, r0.enqueued_at) LIMIT $2
       FOR UPDATE OF r0 SKIP LOCKED)
     UPDATE ${t.runs} r SET delivery_checked_at = now() FROM due WHERE r.id = due.id
     RETURNING r.id, r.job, r.scheduled_at, r.state, r.claim_token`,
  ),
}));

/**
 * The sweep's batch: runs handed to the queue (enqueued_at set) and still waiting for a worker,
 * not looked at for `olderThanMs`, oldest first, marked as looked at now. Only active runs are
 * scanned (cw_open_runs), so the cost follows the backlog, not the ledger.
 */
export async function deliveriesToCheck(
  db: Queryable,
  t: Tables,
  olderThanMs: number,
  limit: number,
): Promise<HandedOverRun[]> {
  const res = await db.query<{
    id: string;
    job: string;
    scheduled_at: Date;
    state: string;
    claim_token: string | null;
  }>({ ...statements(t).toCheck, values: [Math.floor(olderThanMs), limit] });
  return res.rows.map((r) => ({
    runId: BigInt(r.id),
    job: r.job,
    scheduledAt: r.scheduled_at,
    state: r.state,
    claimToken: r.claim_token === null ? null : BigInt(r.claim_token),
  }));
}
