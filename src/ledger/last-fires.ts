/**
 * Each job's newest scheduled (not manual, not one-off) fire, as cw_job_state keeps it: what the
 * leader reconciles from after an election, and what a stand-in compares its slots with. Old runs
 * may be deleted by retention; this row is never moved back, so no instant fires twice.
 *
 * Keyed by slot owner (src/cron/job-names.ts): a runtime schedule's last fire is the newest of its
 * rows under any handler's name ("report/x" before an update, "tick/x" after), so a catch-up after
 * a handler change starts where the schedule stopped, not where its current name last fired.
 */
import { scheduleIdOf, slotOwner } from '../cron/job-names.js';
import type { Tables } from '../db/tables.js';
import { namedStatement, perSchema } from './named-statement.js';
import type { Queryable } from './transaction.js';

const statements = perSchema((t) => ({
  all: namedStatement(
    'last_fires',
    `SELECT job, last_scheduled_at FROM ${t.jobState} WHERE last_scheduled_at IS NOT NULL`,
  ),
  /** Of jobs $1 and the runtime schedules $2 (under any handler's name): two indexed reads. */
  of: namedStatement(
    'last_fires_of',
    `SELECT job, last_scheduled_at FROM ${t.jobState}
     WHERE (job = ANY($1::text[]) OR schedule_id = ANY($2::text[])) AND last_scheduled_at IS NOT NULL`,
  ),
}));

type Row = { job: string; last_scheduled_at: Date };

/** Every slot owner's newest scheduled fire, for reconciliation after an election. */
export async function lastFired(db: Queryable, t: Tables): Promise<Map<string, Date>> {
  const res = await db.query<Row>({ ...statements(t).all, values: [] });
  return byOwner(res.rows);
}

/** The newest scheduled fire of each of `jobs`, keyed by slot owner. */
export async function lastFiredOf(db: Queryable, t: Tables, jobs: readonly string[]): Promise<Map<string, Date>> {
  if (jobs.length === 0) return new Map();
  const ids = jobs.map(scheduleIdOf).filter((id) => id !== undefined);
  const res = await db.query<Row>({ ...statements(t).of, values: [[...jobs], ids] });
  return byOwner(res.rows);
}

function byOwner(rows: Row[]): Map<string, Date> {
  const out = new Map<string, Date>();
  for (const r of rows) {
    const owner = slotOwner(r.job);
    const seen = out.get(owner);
    if (!seen || seen < r.last_scheduled_at) out.set(owner, r.last_scheduled_at);
  }
  return out;
}
