/**
 * The console's reads of runs: the whole ledger paged newest first with a keyset cursor, and one
 * run with every attempt. Order is (scheduled_at DESC, id DESC): the instant the run was for, not
 * when its row was made (a catch-up after a failover commits old instants late). The cursor is
 * the last row's (scheduled_at in microseconds, id): a run inserted while someone pages (a new
 * fire, or a catch-up of an older instant) can never repeat or hide a row already there.
 */
import type pg from 'pg';
import { attemptsOf } from './attempt-rows.js';
import type { RunKind } from '../db/schema.js';
import type { Tables } from '../db/tables.js';

type Db = Pick<pg.Pool, 'query'>;

/** Where a page starts: after this (scheduled instant in µs since the epoch, run id). */
export interface RunCursor {
  scheduledUs: bigint;
  id: bigint;
}

export interface RunPageFilter {
  job?: string;
  state?: string;
  trigger?: string;
  /** Scheduled at or after. */
  from?: Date;
  /** Scheduled before. */
  to?: Date;
  /** Exactly this run. */
  id?: bigint;
  /** The runs of this job at this instant (an idempotency key's); with `onceKey`, the one-off run of that key. */
  slot?: { job: string; scheduledAt: Date; onceKey?: string };
  /** The step run at this place of a workflow run (a step run's idempotency key). */
  step?: { workflowRunId: bigint; step: string; item: number | null };
  limit: number;
  cursor?: RunCursor;
}

export interface RunSummary {
  id: string;
  job: string;
  scheduledAt: string;
  trigger: string;
  leaderToken: string;
  leaderId: string;
  state: string;
  createdAt: string;
  startedAt: string | null;
  finishedAt: string | null;
  attemptCount: number;
  skippedAttempts: number;
  error: string | null;
  /** From the scheduled instant to the first attempt's start (null until one started). */
  latenessMs: number | null;
  /** The newest attempt's run time, if it finished. */
  durationMs: number | null;
  /** Worker of the newest attempt. */
  worker: string | null;
  /** The runtime schedule version that fired it (null: a job from code). */
  scheduleVersion: number | null;
  /** A one-off run's key. */
  onceKey: string | null;
  /** job, workflow (a workflow run) or step (a step run of one: its workflow run, step and item). */
  kind: RunKind;
  workflowRunId: string | null;
  step: string | null;
  /** A mapped step's item index. */
  item: number | null;
}

interface RunRow {
  id: string;
  job: string;
  scheduled_at: Date;
  sched_us: string;
  trigger: string;
  leader_token: string;
  leader_id: string;
  state: string;
  created_at: Date;
  enqueued_at: Date | null;
  started_at: Date | null;
  finished_at: Date | null;
  attempts: number;
  completed_attempt: number | null;
  skipped_attempts: number;
  error: string | null;
  lateness_ms: number | null;
  duration_ms: number | null;
  worker: string | null;
  schedule_version: number | null;
  once_key: string | null;
  kind: RunKind;
  workflow_run_id: string | null;
  step: string | null;
  item: number | null;
}

const RUN_COLUMNS = (t: Tables) => `r.id::text, r.job, r.scheduled_at,
  (extract(epoch FROM r.scheduled_at) * 1000000)::bigint::text AS sched_us, r.trigger, r.leader_token::text,
  r.leader_id, r.state, r.created_at,
  -- Released at its commit, but not handed over until the queue took it (its cw_hand_overs row gone).
  CASE WHEN EXISTS (SELECT 1 FROM ${t.handOvers} h WHERE h.run_id = r.id) THEN NULL ELSE r.enqueued_at END AS enqueued_at,
  r.started_at, r.finished_at, r.attempts, r.completed_attempt,
  r.skipped_attempts, r.error, (extract(epoch FROM r.started_at - r.scheduled_at) * 1000)::float8 AS lateness_ms,
  last.duration_ms, last.worker, r.schedule_version, r.once_key, r.kind, r.workflow_run_id::text, r.step, r.item
  FROM ${t.runs} r LEFT JOIN LATERAL (
    SELECT (extract(epoch FROM a.finished_at - a.started_at) * 1000)::float8 AS duration_ms, a.worker
    FROM (${attemptsOf(t, 'r')}) a WHERE a.state <> 'skipped' ORDER BY a.attempt DESC LIMIT 1) last ON true`;

const iso = (d: Date | null) => d?.toISOString() ?? null;
const ms = (v: number | null) => (v === null ? null : Math.round(v));

function summary(r: RunRow): RunSummary {
  return {
    id: r.id,
    job: r.job,
    scheduledAt: r.scheduled_at.toISOString(),
    trigger: r.trigger,
    leaderToken: r.leader_token,
    leaderId: r.leader_id,
    state: r.state,
    createdAt: r.created_at.toISOString(),
    startedAt: iso(r.started_at),
    finishedAt: iso(r.finished_at),
    attemptCount: r.attempts,
    skippedAttempts: r.skipped_attempts,
    error: r.error,
    latenessMs: ms(r.lateness_ms),
    durationMs: ms(r.duration_ms),
    worker: r.worker,
    scheduleVersion: r.schedule_version,
    onceKey: r.once_key,
    kind: r.kind,
    workflowRunId: r.workflow_run_id,
    step: r.step,
    item: r.item,
  };
}

/** One page of runs, newest first; nextCursor is null on the last page (none after it). */
export async function pageRuns(
  db: Db,
  t: Tables,
  f: RunPageFilter,
): Promise<{ runs: RunSummary[]; nextCursor: RunCursor | null }> {
  const res = await db.query<RunRow>(
    `SELECT ${RUN_COLUMNS(t)}
     WHERE ($1::text IS NULL OR r.job = $1) AND ($2::text IS NULL OR r.state = $2) AND ($3::text IS NULL OR r.trigger = $3)
       AND ($4::timestamptz IS NULL OR r.scheduled_at >= $4) AND ($5::timestamptz IS NULL OR r.scheduled_at < $5)
       AND ($6::bigint IS NULL OR r.id = $6)
       AND ($7::bigint IS NULL OR (r.scheduled_at, r.id) < (timestamptz 'epoch' + $7::bigint * interval '1 microsecond', $8::bigint))
       AND ($10::text IS NULL OR r.once_key = $10)
       AND ($11::bigint IS NULL OR (r.workflow_run_id = $11 AND r.step = $12 AND COALESCE(r.item, -1) = $13))
     ORDER BY r.scheduled_at DESC, r.id DESC LIMIT $9`,
    [
      f.slot?.job ?? f.job ?? null,
      f.state ?? null,
      f.trigger ?? null,
      f.slot?.scheduledAt ?? f.from ?? null,
      f.slot ? new Date(f.slot.scheduledAt.getTime() + 1) : (f.to ?? null),
      f.id?.toString() ?? null,
      f.cursor?.scheduledUs.toString() ?? null,
      f.cursor?.id.toString() ?? null,
      f.limit + 1, // one more than asked: whether there is a next page at all
      f.slot?.onceKey ?? null,
      f.step?.workflowRunId.toString() ?? null,
      f.step?.step ?? null,
      f.step ? (f.step.item ?? -1) : null,
    ],
  );
  const rows = res.rows.slice(0, f.limit);
  const last = rows[rows.length - 1];
  return {
    runs: rows.map(summary),
    nextCursor: res.rows.length > f.limit && last ? { scheduledUs: BigInt(last.sched_us), id: BigInt(last.id) } : null,
  };
}

export interface AttemptDetail {
  attempt: number;
  token: string;
  worker: string;
  /** running | completed | failed | retrying | cancelled | superseded | skipped | stale */
  state: string;
  startedAt: string;
  finishedAt: string | null;
  durationMs: number | null;
  error: string | null;
  errorStack: string | null;
}

export interface RunDetail extends RunSummary {
  /** When the run was handed to the queue; null while it waits in the outbox (held, or not yet taken). */
  enqueuedAt: string | null;
  completedAttempt: number | null;
  /** From the scheduled instant to the leader's commit of the fire. */
  commitLatenessMs: number;
  /**
   * Every attempt in order, re-deliveries that found the run already settled included (state
   * 'skipped', counted in skippedAttempts): they did nothing, and the console shows them as such.
   */
  attempts: AttemptDetail[];
}

/** A run with every attempt, or null when the ledger has no such run. */
export async function runDetail(db: Db, t: Tables, id: bigint): Promise<RunDetail | null> {
  const res = await db.query<RunRow>(`SELECT ${RUN_COLUMNS(t)} WHERE r.id = $1`, [id.toString()]);
  const r = res.rows[0];
  if (!r) return null;
  const att = await db.query<{
    attempt: number;
    token: string;
    worker: string;
    state: string;
    started_at: Date;
    finished_at: Date | null;
    duration_ms: number | null;
    error: string | null;
    error_stack: string | null;
  }>(
    `SELECT a.attempt, a.token::text, a.worker, a.state, a.started_at, a.finished_at, a.error, a.error_stack,
            (extract(epoch FROM a.finished_at - a.started_at) * 1000)::float8 AS duration_ms
     FROM ${t.runs} r, LATERAL (${attemptsOf(t, 'r')}) a WHERE r.id = $1 ORDER BY a.attempt`,
    [id.toString()],
  );
  const attempts: AttemptDetail[] = att.rows.map((a) => ({
    attempt: a.attempt,
    token: a.token,
    worker: a.worker,
    state: a.state,
    startedAt: a.started_at.toISOString(),
    finishedAt: iso(a.finished_at),
    durationMs: ms(a.duration_ms),
    error: a.error,
    errorStack: a.error_stack,
  }));
  return {
    ...summary(r),
    enqueuedAt: iso(r.enqueued_at),
    completedAttempt: r.completed_attempt,
    commitLatenessMs: r.created_at.getTime() - r.scheduled_at.getTime(),
    attempts,
  };
}
