/**
 * Retry of a settled run, on the leader: the same run (same id, same idempotency key) goes back to
 * 'pending' for a new attempt, in one transaction fenced by the leader's token like a fire, so a
 * stale leader's retry is refused by the fence and changes nothing. The next claim gets a new
 * execution token from the sequence, higher than every earlier attempt's: the old attempts stay
 * fenced out, and the new one is numbered after them.
 */
import { RunNotFoundError, RunNotRetryableError } from '../errors.js';
import { advanceFence } from './fences.js';
import type { LeaderStamp } from './commit-stamps.js';
import { sqlStateList } from './run-states.js';
import { fenceHoldLimit, withTransaction } from './transaction.js';
import type { Tables } from '../db/tables.js';
import type pg from 'pg';

/** States a run may be retried from: it settled without its effect by its handler or by policy. */
export const RETRYABLE_STATES = ['failed', 'cancelled'] as const;

export interface RetriedRun {
  runId: bigint;
  job: string;
  scheduledAt: Date;
  /** The state it was retried from. */
  previousState: string;
}

/**
 * Put a failed or cancelled run back to 'pending' under the leader's fence. The run is marked
 * handed over (enqueued_at) with its sweep clock reset, so if the caller dies before handing it to
 * the queue, the re-delivery sweep finds it and the run is never left pending with no one on it.
 * Refused: RunNotFoundError; RunNotRetryableError (completed, still active, skipped, superseded);
 * StaleTokenError from the fence (a newer leader has committed); undefined when the leader's local
 * deadline passed before COMMIT (rolled back).
 */
export async function retryRun(
  pool: pg.Pool,
  t: Tables,
  runId: bigint,
  leader: LeaderStamp,
  fenceIdleLimitMs: number,
): Promise<RetriedRun | undefined> {
  return withTransaction(
    pool,
    async (client, rollback) => {
      await advanceFence(client, t, leader.fenceResource, leader.token);
      const res = await client.query<{ job: string; scheduled_at: Date; previous: string }>(
        `UPDATE ${t.runs} r SET state = 'pending', finished_at = NULL, error = NULL, enqueued_at = now(),
         delivery_checked_at = NULL
       FROM (SELECT id, state AS previous FROM ${t.runs} WHERE id = $1 FOR UPDATE) old
       WHERE r.id = old.id AND r.state IN ${sqlStateList(RETRYABLE_STATES)}
       RETURNING r.job, r.scheduled_at, old.previous`,
        [runId.toString()],
      );
      const row = res.rows[0];
      if (!row) {
        const now = await client.query<{ state: string }>(`SELECT state FROM ${t.runs} WHERE id = $1`, [
          runId.toString(),
        ]);
        const state = now.rows[0]?.state;
        throw state === undefined ? new RunNotFoundError(runId) : new RunNotRetryableError(runId, state);
      }
      if (!leader.stillLeading()) {
        await rollback();
        return undefined;
      }
      return { runId, job: row.job, scheduledAt: row.scheduled_at, previousState: row.previous };
    },
    fenceHoldLimit(fenceIdleLimitMs),
  );
}
