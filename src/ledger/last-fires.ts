/**
 * Each job's newest scheduled (not manual, not one-off) fire, as cw_job_state keeps it: what the
 * leader reconciles from after an election, and what a stand-in compares its slots with. Old runs
 * may be deleted by retention; this row is never moved back, so no instant fires twice.
 */
import type { Tables } from '../db/tables.js';
import { namedStatement, perSchema } from './named-statement.js';
import type { Queryable } from './transaction.js';

const statements = perSchema((t) => ({
  all: namedStatement(
    'last_fires',
    `SELECT job, last_scheduled_at FROM ${t.jobState} WHERE last_scheduled_at IS NOT NULL`,
  ),
  /** Of jobs $1 only: one indexed read. */
  of: namedStatement(
    'last_fires_of',
    `SELECT job, last_scheduled_at FROM ${t.jobState} WHERE job = ANY($1::text[]) AND last_scheduled_at IS NOT NULL`,
  ),
}));

type Row = { job: string; last_scheduled_at: Date };

/** Every job's newest scheduled fire, for reconciliation after an election. */
export async function lastFired(db: Queryable, t: Tables): Promise<Map<string, Date>> {
  const res = await db.query<Row>({ ...statements(t).all, values: [] });
  return new Map(res.rows.map((r) => [r.job, r.last_scheduled_at]));
}

/** The newest scheduled fire of each of `jobs`. */
export async function lastFiredOf(db: Queryable, t: Tables, jobs: readonly string[]): Promise<Map<string, Date>> {
  if (jobs.length === 0) return new Map();
  const res = await db.query<Row>({ ...statements(t).of, values: [[...jobs]] });
  return new Map(res.rows.map((r) => [r.job, r.last_scheduled_at]));
}
