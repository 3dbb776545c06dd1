/**
 * Attempt rows are written once, when the attempt ends (its outcome, a takeover, a cancellation, a
 * hand-back), by the statement that moves the run off that attempt's claim, under the run's row
 * lock. While it runs, the attempt is the run's own row (state 'running': attempts, claim_token,
 * claimed_by, claimed_at), so a claim and a completion write one attempt row, not a row and then
 * its second version with the entries of both in the table's indexes.
 *
 * Versions before migration 0020 wrote a 'running' row at the claim: whoever ends that attempt
 * settles the row instead, and a row that already ended is left as it is.
 */
import type { Tables } from '../db/tables.js';

/** Who ran an attempt when its claim recorded no one (a claim of a version that did not). */
export const UNKNOWN_WORKER = 'an unknown worker';

/**
 * SQL: an INSERT of the ended attempts of this replica's own claims `select` yields (the columns of
 * writeEndedAttempts): a claim of this version has no row before it ends, and a row that already
 * stands for the attempt (it went back to wait for a slot, or a version before 0020 claimed it,
 * whose row the caller settles) is left as it is. A plain INSERT, not the upsert: a speculative
 * insertion writes a second WAL record per row (48 B a run, measured).
 */
export function writeOwnEndedAttempts(t: Tables, select: string): string {
  return `INSERT INTO ${t.runAttempts} (run_id, attempt, token, worker, state, started_at, error, error_stack, finished_at)
    SELECT ended.*, now() FROM (${select}) ended (run_id, attempt, token, worker, state, started_at, error, error_stack)
    WHERE NOT EXISTS (SELECT 1 FROM ${t.runAttempts} o WHERE o.run_id = ended.run_id AND o.attempt = ended.attempt)`;
}

/**
 * SQL: an INSERT of the ended attempts `select` yields, in the columns' order: run_id, attempt,
 * token, worker, state, started_at, error, error_stack (finished now). For attempts of any claim,
 * a 'running' row a version before 0020 wrote at it included (a takeover, a cancellation).
 */
export function writeEndedAttempts(t: Tables, select: string): string {
  return `INSERT INTO ${t.runAttempts} AS a (run_id, attempt, token, worker, state, started_at, error, error_stack, finished_at)
    SELECT ended.*, now() FROM (${select}) ended
    ON CONFLICT (run_id, attempt) DO UPDATE SET state = EXCLUDED.state, finished_at = now(), error = EXCLUDED.error,
      error_stack = EXCLUDED.error_stack
    WHERE a.state = 'running'`;
}

/**
 * SQL: the UPDATE that settles the 'running' rows a version before 0020 wrote at its claims, of the
 * attempts `source` names (run_id, attempt, outcome, message, stack): as the outcome where CTE
 * `run` (the runs the statement moved off those claims) holds the run, 'stale' where it was refused.
 */
export function settleOldClaimRows(t: Tables, source: string): string {
  return `UPDATE ${t.runAttempts} a
    SET state = CASE WHEN EXISTS (SELECT 1 FROM run WHERE run.id = a.run_id) THEN s.outcome ELSE 'stale' END,
      finished_at = now(), error = s.message, error_stack = s.stack
    FROM ${source} s WHERE a.run_id = s.run_id AND a.attempt = s.attempt AND a.state = 'running'`;
}

/**
 * SQL: the attempts of run `r` (a row alias in scope), ended and running, with the columns of
 * cw_run_attempts: its rows, and its running attempt from the run's row unless a row already
 * stands for it (a version before 0020 wrote one at the claim). A workflow run's attempt ended when
 * it was pinned to its definition; its steps run as runs of their own.
 */
export function attemptsOf(t: Tables, r: string): string {
  return `SELECT a.run_id, a.attempt, a.token, a.worker, a.state, a.started_at, a.finished_at, a.error, a.error_stack
      FROM ${t.runAttempts} a WHERE a.run_id = ${r}.id
    UNION ALL
    SELECT ${r}.id, ${r}.attempts, ${r}.claim_token, COALESCE(${r}.claimed_by, '${UNKNOWN_WORKER}'), 'running',
      COALESCE(${r}.claimed_at, ${r}.started_at, ${r}.created_at), NULL::timestamptz, NULL::text, NULL::text
    WHERE ${r}.state = 'running' AND ${r}.kind <> 'workflow' AND ${r}.claim_token IS NOT NULL
      AND NOT EXISTS (SELECT 1 FROM ${t.runAttempts} o WHERE o.run_id = ${r}.id AND o.attempt = ${r}.attempts)`;
}

/**
 * SQL: the INSERT that ends, as 'cancelled' with reason `error`, the running attempt of each run
 * CTE `runs` holds (id, attempts, claim_token, claimed_by, claimed_at: the claim the run was on).
 * Only a running attempt has no ended row, so the other runs' attempts are left as they are.
 */
export function cancelledAttempts(t: Tables, runs: string, error: string): string {
  return writeEndedAttempts(
    t,
    `SELECT id, attempts, claim_token, COALESCE(claimed_by, '${UNKNOWN_WORKER}'), 'cancelled',
       COALESCE(claimed_at, now()), ${error}::text, NULL::text
     FROM ${runs} WHERE claim_token IS NOT NULL AND attempts > 0`,
  );
}
