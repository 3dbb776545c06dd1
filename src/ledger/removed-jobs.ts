/**
 * Jobs removed from the code: once no live replica defines a job, its active runs are settled
 * `cancelled` and then its per-job state (last fire, pause flag) is forgotten. `defined` is the
 * jobs of every live member; a runtime schedule's job ("handler/id") counts by its handler.
 * node-cron coordinator runs ("node-cron:…") are not jobs of any replica and are never touched.
 * Workflow runs and their steps are settled by their workflow run (workflow-control.ts), which
 * fails once no live replica defines the definition it was started with.
 */
import type { Tables } from '../db/tables.js';
import { namedStatement, perSchema } from './named-statement.js';
import { ACTIVE_SQL, openRunsOf } from './run-states.js';
import { cancelledAttempts } from './attempt-rows.js';
import type { Queryable } from './transaction.js';

const statements = perSchema((t) => ({
  /** Cancel, with reason $2, active runs older than $3 ms of jobs not in $1. */
  cancelRuns: namedStatement(
    'cancel_runs_of_removed_jobs',
    `WITH cancelled AS (
       UPDATE ${t.runs} r SET state = 'cancelled', finished_at = now(), error = $2
       FROM ${t.openRuns} o
       WHERE r.id = o.run_id AND r.state IN ${ACTIVE_SQL} AND r.kind = 'job' AND split_part(o.job, '/', 1) <> ALL($1::text[])
         AND o.job NOT LIKE 'node-cron:%'
         AND r.created_at < now() - $3::bigint * interval '1 millisecond'
       RETURNING r.id, r.job, r.attempts, r.claim_token, r.claimed_by, r.claimed_at),
     attempts AS (${cancelledAttempts(t, 'cancelled', '$2')})
     SELECT id, job FROM cancelled`,
  ),
  /** Delete the state of jobs not in $1 that have no active run left. */
  forget: namedStatement(
    'forget_removed_jobs',
    `DELETE FROM ${t.jobState} s
     WHERE split_part(s.job, '/', 1) <> ALL($1::text[]) AND s.job NOT LIKE 'node-cron:%'
       AND NOT EXISTS (SELECT 1 FROM ${openRunsOf(t, 'r')} WHERE r_open.job = s.job AND r.state IN ${ACTIVE_SQL})
     RETURNING s.job`,
  ),
}));

/**
 * Settle the active runs of jobs no live replica defines `cancelled` with `reason`. Runs younger
 * than `graceMs` are left alone (a replica that defines the job may just be starting).
 */
export async function cancelRunsOfUndefinedJobs(
  db: Queryable,
  t: Tables,
  defined: readonly string[],
  reason: string,
  graceMs: number,
): Promise<{ runId: bigint; job: string }[]> {
  const res = await db.query<{ id: string; job: string }>({
    ...statements(t).cancelRuns,
    values: [[...defined], reason, Math.floor(graceMs)],
  });
  return res.rows.map((r) => ({ runId: BigInt(r.id), job: r.job }));
}

/** Forget the state of jobs no live replica defines once they have no active run; returns the jobs. */
export async function forgetUndefinedJobs(db: Queryable, t: Tables, defined: readonly string[]): Promise<string[]> {
  const res = await db.query<{ job: string }>({ ...statements(t).forget, values: [[...defined]] });
  return res.rows.map((r) => r.job);
}
