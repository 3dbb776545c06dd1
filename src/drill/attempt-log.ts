/**
 * The drill's independent effect log: one row per attempt of a drill job, appended by the workload
 * in its own autocommit statement after ctx.transaction returned or threw (so a refused, rolled-back
 * attempt still leaves its trace). Shared by the workload (writer), the drill (creates the table)
 * and the checker (reads it).
 */
export const ATTEMPT_LOG_TABLE = 'cw_drill_attempt_log';

/**
 * How one attempt's fenced write ended: 'committed' (effect and completion committed together),
 * 'refused' (the claim check or the fence threw StaleTokenError / AbortedError: a stale write
 * refused), 'skipped' (the run was already completed, the write was not attempted), 'failed' (any
 * other error).
 */
export type AttemptOutcome = 'committed' | 'refused' | 'skipped' | 'failed';

export const ATTEMPT_LOG_DDL =
  `CREATE TABLE ${ATTEMPT_LOG_TABLE} (id bigserial PRIMARY KEY, run_id bigint NOT NULL, job text NOT NULL, token bigint NOT NULL, ` +
  `outcome text NOT NULL CHECK (outcome IN ('committed', 'refused', 'skipped', 'failed')), replica text NOT NULL, ` +
  `error text, logged_at timestamptz NOT NULL DEFAULT clock_timestamp())`;
