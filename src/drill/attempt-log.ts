/**
 * The drill's independent effect log: one row per attempt of a drill job, appended by the workload
 * in its own autocommit statement after ctx.transaction returned or threw (so a refused, rolled-back
 * attempt still leaves its trace). Shared by the workload (writer), the drill (creates the table)
 * and the checker (reads it). It names the run's job and scheduled time too, so when it lives
 * outside the ledger (the drill's ledger faults) it still recognises a run the ledger has lost.
 */
import type pg from 'pg';

export const ATTEMPT_LOG_TABLE = 'cw_drill_attempt_log';

/**
 * How one attempt's fenced write ended: 'committed' (effect and completion committed together),
 * 'refused' (the claim check or the fence threw StaleTokenError / AbortedError: a stale write
 * refused), 'skipped' (the run was already completed, the write was not attempted), 'failed' (any
 * other error).
 */
export type AttemptOutcome = 'committed' | 'refused' | 'skipped' | 'failed';

export const ATTEMPT_LOG_DDL =
  `CREATE TABLE ${ATTEMPT_LOG_TABLE} (id bigserial PRIMARY KEY, run_id bigint NOT NULL, job text NOT NULL, scheduled_at timestamptz NOT NULL, ` +
  `token bigint NOT NULL, outcome text NOT NULL CHECK (outcome IN ('committed', 'refused', 'skipped', 'failed')), replica text NOT NULL, ` +
  `error text, logged_at timestamptz NOT NULL DEFAULT clock_timestamp())`;

/** Rows of attempts on runs scheduled in [from, to], in log order. The drill's own table, not cronwarden's. */
export async function readAttemptLog(
  db: Pick<pg.Pool, 'query'>,
  from: Date,
  to: Date,
): Promise<
  { runId: bigint; token: bigint; outcome: AttemptOutcome; job: string; scheduledAt: number; loggedAt: number }[]
> {
  const res = await db.query<{
    run_id: string;
    token: string;
    outcome: AttemptOutcome;
    job: string;
    scheduled_at: Date;
    logged_at: Date;
  }>(
    `SELECT run_id, token, outcome, job, scheduled_at, logged_at FROM ${ATTEMPT_LOG_TABLE} WHERE scheduled_at BETWEEN $1 AND $2 ORDER BY id`,
    [from, to],
  );
  return res.rows.map((l) => ({
    runId: BigInt(l.run_id),
    token: BigInt(l.token),
    outcome: l.outcome,
    job: l.job,
    scheduledAt: l.scheduled_at.getTime(),
    loggedAt: l.logged_at.getTime(),
  }));
}
