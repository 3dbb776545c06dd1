/**
 * The re-delivery sweep's statements: a run handed to the queue that is still active after a while
 * is looked at again (the leader hands it over again or settles it), so a run the queue lost is
 * never left pending or running with no one on it (I6).
 */
import type pg from 'pg';
import type { Tables } from '../db/tables.js';
import { namedStatement, perSchema } from './named-statement.js';
import { ACTIVE_SQL } from './run-states.js';
import { storedError } from './stored-text.js';
import { withTransaction, type Queryable } from './transaction.js';

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
  /** Up to $2 active handed-over runs not looked at for $1 ms, oldest first, marked as looked at. */
  toCheck: namedStatement(
    'deliveries_to_check',
    `WITH due AS (
       SELECT id FROM ${t.runs}
       WHERE state IN ${ACTIVE_SQL} AND enqueued_at IS NOT NULL
         AND COALESCE(delivery_checked_at, enqueued_at) < now() - $1::bigint * interval '1 millisecond'
       ORDER BY COALESCE(delivery_checked_at, enqueued_at) LIMIT $2
       FOR UPDATE SKIP LOCKED)
     UPDATE ${t.runs} r SET delivery_checked_at = now() FROM due WHERE r.id = due.id
     RETURNING r.id, r.job, r.scheduled_at, r.state, r.claim_token`,
  ),
  /** Fail run $1 with error $3 if it is still active under claim $2. */
  failRun: namedStatement(
    'fail_unrecorded_run',
    `UPDATE ${t.runs} SET state = 'failed', finished_at = now(), error = $3
     WHERE id = $1 AND state IN ${ACTIVE_SQL} AND claim_token IS NOT DISTINCT FROM $2::bigint`,
  ),
  /** Fail run $1's running attempt with error $2. */
  failAttempt: namedStatement(
    'fail_unrecorded_attempt',
    `UPDATE ${t.runAttempts} SET state = 'failed', finished_at = now(), error = $2 WHERE run_id = $1 AND state = 'running'`,
  ),
}));

/**
 * The sweep's batch: active runs handed to the queue (enqueued_at set) that were not looked at
 * for `olderThanMs`, oldest first, marked as looked at now. Only active runs are scanned (the
 * partial index cw_runs_active), so the cost follows the backlog, not the ledger.
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

/**
 * Settle a run the queue gave up on while the ledger never heard its outcome: failed, with the
 * reason, unless its state or newest claim moved on since it was read (then someone is on it).
 */
export async function failUnrecorded(pool: pg.Pool, t: Tables, run: HandedOverRun, reason: string): Promise<boolean> {
  const stored = storedError(reason);
  return withTransaction(pool, async (client) => {
    const s = statements(t);
    const res = await client.query({
      ...s.failRun,
      values: [run.runId.toString(), run.claimToken?.toString() ?? null, stored.message],
    });
    if (res.rowCount !== 1) return false;
    await client.query({ ...s.failAttempt, values: [run.runId.toString(), stored.message] });
    return true;
  });
}
