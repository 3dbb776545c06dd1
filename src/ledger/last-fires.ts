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
import { SLOT_KEY_PREDICATE } from '../db/schema.js';
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
  /**
   * As `of`, with the run that holds each last slot: its trigger and when it was committed
   * (created_at), so a stand-in learns how late the leader commits (one more indexed read a job).
   */
  commitsOf: namedStatement(
    'last_commits_of',
    `SELECT s.job, s.last_scheduled_at, r.trigger, r.created_at FROM ${t.jobState} s
     LEFT JOIN LATERAL (
       SELECT trigger, created_at FROM ${t.runs}
       WHERE job = s.job AND scheduled_at = s.last_scheduled_at AND ${SLOT_KEY_PREDICATE} LIMIT 1) r ON true
     WHERE (s.job = ANY($1::text[]) OR s.schedule_id = ANY($2::text[])) AND s.last_scheduled_at IS NOT NULL`,
  ),
}));

type Row = { job: string; last_scheduled_at: Date };

/** A slot owner's last scheduled fire and, while its run is kept, who committed it and when. */
export interface LastCommit {
  slot: Date;
  /** The run's trigger ('schedule' or 'catchup': the leader; 'standin': a follower); null once retention deleted it. */
  trigger: string | null;
  committedAt: Date | null;
}

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

/** lastFiredOf with the committing run of each last slot (see LastCommit). */
export async function lastCommitsOf(
  db: Queryable,
  t: Tables,
  jobs: readonly string[],
): Promise<Map<string, LastCommit>> {
  const out = new Map<string, LastCommit>();
  if (jobs.length === 0) return out;
  const ids = jobs.map(scheduleIdOf).filter((id) => id !== undefined);
  const res = await db.query<Row & { trigger: string | null; created_at: Date | null }>({
    ...statements(t).commitsOf,
    values: [[...jobs], ids],
  });
  for (const [owner, r] of newestByOwner(res.rows))
    out.set(owner, { slot: r.last_scheduled_at, trigger: r.trigger, committedAt: r.created_at });
  return out;
}

function byOwner(rows: Row[]): Map<string, Date> {
  return new Map([...newestByOwner(rows)].map(([owner, r]) => [owner, r.last_scheduled_at]));
}

/** Each slot owner's row with the newest last_scheduled_at (a runtime schedule has one per handler name). */
function newestByOwner<R extends Row>(rows: readonly R[]): Map<string, R> {
  const out = new Map<string, R>();
  for (const r of rows) {
    const owner = slotOwner(r.job);
    const seen = out.get(owner);
    if (!seen || seen.last_scheduled_at < r.last_scheduled_at) out.set(owner, r);
  }
  return out;
}
