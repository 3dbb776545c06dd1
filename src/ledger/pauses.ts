/**
 * Pauses with a reason and an optional expiry, in cw_job_state. A pause is set and lifted by an
 * operator on any replica (no fence: an operator's word, not a fire); an expired pause is lifted by
 * the leader under the scheduler's fence, so only the current leader records the resume, once.
 *
 * The boundary rule: a slot scheduled at or after `until` fires, whether or not the leader has
 * lifted the pause yet (the fire loop compares each slot with `until`); a slot before it is
 * recorded skipped. So the moment the flag is cleared decides nothing about which slots fire.
 */
import type pg from 'pg';
import { advanceFence } from './fences.js';
import { namedStatement, perSchema } from './named-statement.js';
import { fenceHoldLimit, withTransaction, type Queryable } from './transaction.js';
import type { Tables } from '../db/tables.js';

export interface JobPause {
  job: string;
  reason: string | null;
  /** Who paused it: "admin" or "admin (<cli user>)"; null for a pause from before reasons were kept. */
  by: string | null;
  at: Date | null;
  /** Slots scheduled at or after this instant fire; null = until resumed. */
  until: Date | null;
}

export interface PauseRequest {
  reason: string | null;
  by: string;
  until: Date | null;
}

type PauseRow = {
  job: string;
  paused_reason: string | null;
  paused_by: string | null;
  paused_at: Date | null;
  paused_until: Date | null;
};

const COLUMNS = 'job, paused_reason, paused_by, paused_at, paused_until';

const statements = perSchema((t) => ({
  paused: namedStatement('paused_jobs', `SELECT job FROM ${t.jobState} WHERE paused`),
  list: namedStatement('list_pauses', `SELECT ${COLUMNS} FROM ${t.jobState} WHERE paused`),
  /** Pause job $1 with reason $2, by $3, until $4 (null: until resumed). */
  pause: namedStatement(
    'pause_job',
    `INSERT INTO ${t.jobState} AS s (job, paused, paused_reason, paused_by, paused_at, paused_until)
     VALUES ($1, true, $2, $3, now(), $4)
     ON CONFLICT (job) DO UPDATE SET paused = true, paused_reason = EXCLUDED.paused_reason,
       paused_by = EXCLUDED.paused_by, paused_at = EXCLUDED.paused_at, paused_until = EXCLUDED.paused_until,
       updated_at = now()
     RETURNING ${COLUMNS}`,
  ),
  /** Set job $1's flag to $2, clearing reason, who and expiry. */
  setFlag: namedStatement(
    'set_paused_flag',
    `INSERT INTO ${t.jobState} (job, paused, paused_at) VALUES ($1, $2, CASE WHEN $2 THEN now() END)
     ON CONFLICT (job) DO UPDATE SET paused = EXCLUDED.paused, paused_reason = NULL, paused_by = NULL,
       paused_at = EXCLUDED.paused_at, paused_until = NULL, updated_at = now()`,
  ),
  /** Lift the pauses expired at $1, returning each as it was. */
  expire: namedStatement(
    'expire_pauses',
    `WITH expired AS (
       SELECT ${COLUMNS} FROM ${t.jobState}
       WHERE paused AND paused_until IS NOT NULL AND paused_until <= $1 FOR UPDATE)
     UPDATE ${t.jobState} s SET paused = false, paused_reason = NULL, paused_by = NULL, paused_at = NULL,
       paused_until = NULL, updated_at = now()
     FROM expired WHERE s.job = expired.job
     RETURNING expired.job, expired.paused_reason, expired.paused_by, expired.paused_at, expired.paused_until`,
  ),
}));

function toPause(r: PauseRow): JobPause {
  return { job: r.job, reason: r.paused_reason, by: r.paused_by, at: r.paused_at, until: r.paused_until };
}

/** The names of the paused jobs, expired or not. */
export async function pausedJobs(db: Queryable, t: Tables): Promise<Set<string>> {
  const res = await db.query<{ job: string }>({ ...statements(t).paused, values: [] });
  return new Set(res.rows.map((r) => r.job));
}

/** Every paused job, expired or not (the caller compares `until` with its clock). */
export async function listPauses(db: Queryable, t: Tables): Promise<Map<string, JobPause>> {
  const res = await db.query<PauseRow>({ ...statements(t).list, values: [] });
  return new Map(res.rows.map((r) => [r.job, toPause(r)]));
}

/** Pause a job (or replace its pause) with a reason, who, and an optional expiry. */
export async function pauseJob(db: Queryable, t: Tables, job: string, p: PauseRequest): Promise<JobPause> {
  const res = await db.query<PauseRow>({
    ...statements(t).pause,
    values: [job, p.reason, p.by, p.until?.toISOString() ?? null],
  });
  return toPause(res.rows[0]!);
}

/** Set or clear the pause flag alone; either way the reason, who and expiry of an earlier pause go. */
export async function setPausedFlag(db: Queryable, t: Tables, job: string, paused: boolean): Promise<void> {
  await db.query({ ...statements(t).setFlag, values: [job, paused] });
}

/**
 * Lift the pauses whose expiry is at or before `nowMs`, under the scheduler's fence (a stale leader
 * gets StaleTokenError and lifts nothing). Returns each lifted pause as it was, exactly once across
 * replicas: the conditional UPDATE matches a row only while it is still paused with that expiry.
 */
export async function expirePauses(
  pool: pg.Pool,
  t: Tables,
  nowMs: number,
  fence: { resource: string; token: bigint },
  fenceIdleLimitMs: number,
): Promise<JobPause[]> {
  return withTransaction(
    pool,
    async (client) => {
      await advanceFence(client, t, fence.resource, fence.token);
      const res = await client.query<PauseRow>({
        ...statements(t).expire,
        values: [new Date(nowMs).toISOString()],
      });
      return res.rows.map(toPause);
    },
    fenceHoldLimit(fenceIdleLimitMs),
  );
}

/** True when `pause` still holds the slot scheduled at `scheduledAt` (slots at or after `until` fire). */
export function pauseHolds(pause: Pick<JobPause, 'until'>, scheduledAt: Date): boolean {
  return pause.until === null || scheduledAt.getTime() < pause.until.getTime();
}
