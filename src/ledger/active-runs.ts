/**
 * Which jobs have runs still being worked on (pending, running, retrying): what the overlap
 * policies look at before a fire (skip, queue) and how many of a job's runs wait undelivered.
 */
import type { Tables } from '../db/tables.js';
import type pg from 'pg';
import { perSchema } from './named-statement.js';
import { queryByKey, sqlPrepared } from './sql-prepared.js';
import { ACTIVE_SQL } from './run-states.js';
import { sqlTextArray } from './transaction.js';

const statements = perSchema((t) => ({
  /**
   * Of jobs $1: the active runs' ids, and how many are not yet handed to the queue. Planned by key
   * (sql-prepared.ts): a plan made while cw_runs was small hash-joined a sequential scan of it.
   */
  byJob: sqlPrepared(
    'active_runs_by_job',
    ['text[]'],
    // From the jobs' open runs (cw_open_runs by job) to each run by its id, never the other way.
    `SELECT o.job, array_agg(r.id::text) AS ids, (count(*) FILTER (WHERE r.enqueued_at IS NULL))::int AS held
     FROM ${t.openRuns} o
     CROSS JOIN LATERAL (SELECT r.id, r.enqueued_at FROM ${t.runs} r WHERE r.id = o.run_id AND r.state IN ${ACTIVE_SQL} LIMIT 1) r
     WHERE o.job = ANY($1::text[]) GROUP BY o.job`,
  ),
}));

/** Active runs of the given jobs, and how many wait undelivered; a job with none is absent. */
export async function activeJobs(
  pool: pg.Pool,
  t: Tables,
  jobs: string[],
): Promise<Map<string, { ids: bigint[]; held: number }>> {
  if (jobs.length === 0) return new Map();
  const res = await queryByKey(pool, statements(t).byJob, [sqlTextArray(jobs)]);
  const rows = res.rows as { job: string; ids: string[]; held: number }[];
  return new Map(rows.map((r) => [r.job, { ids: r.ids.map((id) => BigInt(id)), held: r.held }]));
}
