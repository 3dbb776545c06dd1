/**
 * Retention: finished runs (completed, failed, skipped, cancelled, superseded) are deleted in
 * batches once old enough, with their attempts (a trigger on cw_runs, migration 0022). Safe for the schedule:
 * reconciliation after an election reads cw_job_state (last-fires.ts), not old runs, so a deleted
 * run's instant is never fired again.
 */
import type { Tables } from '../db/tables.js';
import { namedStatement, perSchema } from './named-statement.js';
import { FINISHED_SQL } from './run-states.js';
import type { Queryable } from './transaction.js';

const statements = perSchema((t) => ({
  /** Delete up to $2 finished runs created more than $1 ms ago. */
  prune: namedStatement(
    'prune_finished_runs',
    `DELETE FROM ${t.runs} WHERE id IN (
       SELECT id FROM ${t.runs}
       WHERE state IN ${FINISHED_SQL} AND created_at < now() - $1::bigint * interval '1 millisecond'
       LIMIT $2)`,
  ),
}));

/** Delete up to `batch` finished runs created more than `olderThanMs` ago; returns how many went. */
export async function pruneFinishedRuns(db: Queryable, t: Tables, olderThanMs: number, batch: number): Promise<number> {
  const res = await db.query({ ...statements(t).prune, values: [Math.floor(olderThanMs), batch] });
  return res.rowCount ?? 0;
}
