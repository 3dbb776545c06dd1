/**
 * Which jobs have runs still being worked on (pending, running, retrying): what the overlap
 * policies look at before a fire (skip, queue) and how many of a job's runs wait undelivered.
 */
import type { Tables } from '../db/tables.js';
import { namedStatement, perSchema } from './named-statement.js';
import { ACTIVE_SQL, openRunsOf } from './run-states.js';
import type { Queryable } from './transaction.js';

const statements = perSchema((t) => ({
  /** Of jobs $1: the active runs' ids, and how many are not yet handed to the queue. */
  byJob: namedStatement(
    'active_runs_by_job',
    `SELECT r.job, array_agg(r.id::text) AS ids, (count(*) FILTER (WHERE r.enqueued_at IS NULL))::int AS held
     FROM ${openRunsOf(t, 'r')} WHERE r_open.job = ANY($1::text[]) AND r.state IN ${ACTIVE_SQL} GROUP BY r.job`,
  ),
}));

/** Active runs of the given jobs, and how many wait undelivered; a job with none is absent. */
export async function activeJobs(
  db: Queryable,
  t: Tables,
  jobs: string[],
): Promise<Map<string, { ids: bigint[]; held: number }>> {
  if (jobs.length === 0) return new Map();
  const res = await db.query<{ job: string; ids: string[]; held: number }>({
    ...statements(t).byJob,
    values: [jobs],
  });
  return new Map(res.rows.map((r) => [r.job, { ids: r.ids.map((id) => BigInt(id)), held: r.held }]));
}
