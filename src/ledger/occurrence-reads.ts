/**
 * Reads for "what happened at each due instant of a job" (the explain API and CLI, the console's
 * timeline, the drill) and for the live checker's count of unanswered instants. The walk itself is
 * src/cron/occurrence-timeline.ts; this module reads its rows: the job's schedule eras, its
 * scheduled runs in the range, its missed ranges and its watermark (the newest of its last fire and
 * its last missed instant). A runtime schedule ("<handler>/<id>") is read by its id, whatever
 * handler's name its runs carry.
 */
import { scheduleIdOf, slotOwner } from '../cron/job-names.js';
import {
  occurrenceTimeline,
  type Timeline,
  type TimelineEra,
  type TimelineMissed,
  type TimelineRun,
} from '../cron/occurrence-timeline.js';
import { scheduleOf } from '../cron/schedule-era.js';
import type { FireSchedule } from '../cron/scheduled-job.js';
import type { Tables } from '../db/tables.js';
import { lastFiredOf } from './last-fires.js';
import { namedStatement, perSchema } from './named-statement.js';
import { erasOverlapping, type ScheduleEra } from './schedule-eras.js';
import type { Queryable } from './transaction.js';

/** At most this many instants are looked at one by one per call (more: ask again from where it stopped). */
export const OCCURRENCE_LIMIT = 10_000;

const statements = perSchema((t) => ({
  /** Job $1's scheduled runs in [$2, $3], oldest first, at most $4 (index cw_runs_job_scheduled_id). */
  runsOfJob: namedStatement(
    'occurrence_runs_of_job',
    `SELECT id::text AS id, scheduled_at, state, trigger, error FROM ${t.runs}
     WHERE job = $1 AND scheduled_at >= $2 AND scheduled_at <= $3 AND trigger NOT IN ('manual', 'once', 'step')
     ORDER BY scheduled_at LIMIT $4`,
  ),
  /** Runtime schedule $1's runs under any handler's name (index cw_runs_schedule_slot). */
  runsOfSchedule: namedStatement(
    'occurrence_runs_of_schedule',
    `SELECT id::text AS id, scheduled_at, state, trigger, error FROM ${t.runs}
     WHERE schedule_id = $1 AND scheduled_at >= $2 AND scheduled_at <= $3 AND trigger NOT IN ('manual', 'once')
       AND duplicate_of IS NULL
     ORDER BY scheduled_at LIMIT $4`,
  ),
  /** Missed ranges of job $1 (or of runtime schedule $2 under any name) overlapping [$3, $4]. */
  missed: namedStatement(
    'occurrence_missed_ranges',
    `SELECT first_at, last_at, count, count_exact, reason, outage_start, outage_end, leader_token::text AS leader_token,
       leader_id
     FROM ${t.missedRanges}
     WHERE (job = $1 OR ($2::text IS NOT NULL AND schedule_id = $2)) AND last_at >= $3 AND first_at <= $4
     ORDER BY first_at LIMIT $5`,
  ),
  /** The newest missed instant of job $1 (or of runtime schedule $2). */
  newestMissed: namedStatement(
    'occurrence_newest_missed',
    `SELECT max(last_at) AS last_at FROM ${t.missedRanges} WHERE job = $1 OR ($2::text IS NOT NULL AND schedule_id = $2)`,
  ),
  /** Every slot owner with an era overlapping [$1, $2]. */
  accounted: namedStatement(
    'occurrence_accounted_jobs',
    `SELECT DISTINCT job FROM ${t.scheduleEras} WHERE from_at <= $2 AND (to_at IS NULL OR to_at >= $1) ORDER BY job`,
  ),
  /** A page of those: the next $4 slot owners after $3, in order. */
  accountedPage: namedStatement(
    'occurrence_accounted_jobs_page',
    `SELECT DISTINCT job FROM ${t.scheduleEras} WHERE from_at <= $2 AND (to_at IS NULL OR to_at >= $1) AND job > $3 ORDER BY job LIMIT $4`,
  ),
  /** Any era of slot owner $1 (does the ledger know the job at all). */
  anyEra: namedStatement('occurrence_any_era', `SELECT 1 FROM ${t.scheduleEras} WHERE job = $1 LIMIT 1`),
}));

export interface OccurrenceQuery {
  job: string;
  from: Date;
  to: Date;
  now: Date;
  /** Default OCCURRENCE_LIMIT. */
  limit?: number;
  /** Runs finished before this may have been deleted by retention. */
  retainedFrom?: Date;
  /** The job's schedule as defined now, to enumerate the time before its first era by. */
  currentSchedule?: FireSchedule;
}

export interface OccurrenceReport extends Timeline {
  eras: ScheduleEra[];
  /** The newest instant a leader accounted for; null: none. */
  watermark: Date | null;
}

/** Every due instant of `q.job` in [from, to] with its answer, collapsed, bounded by the limit. */
export async function readOccurrences(db: Queryable, t: Tables, q: OccurrenceQuery): Promise<OccurrenceReport> {
  const limit = q.limit ?? OCCURRENCE_LIMIT;
  const owner = slotOwner(q.job);
  const scheduleId = scheduleIdOf(q.job) ?? null;
  const s = statements(t);
  const [eras, runs, missed, watermark] = await Promise.all([
    erasOverlapping(db, t, owner, q.from, q.to),
    db.query<{ id: string; scheduled_at: Date; state: string; trigger: string; error: string | null }>({
      ...(scheduleId === null ? s.runsOfJob : s.runsOfSchedule),
      values: [scheduleId ?? q.job, q.from, q.to, limit + 1],
    }),
    db.query<MissedRow>({ ...s.missed, values: [q.job, scheduleId, q.from, q.to, limit + 1] }),
    watermarkOf(db, t, q.job),
  ]);
  const timeline = occurrenceTimeline({
    fromMs: q.from.getTime(),
    toMs: q.to.getTime(),
    nowMs: q.now.getTime(),
    eras: eras.map(toTimelineEra),
    beforeEras: q.currentSchedule ?? null,
    runs: runs.rows.map((r): TimelineRun => ({
      runId: r.id,
      atMs: r.scheduled_at.getTime(),
      state: r.state,
      trigger: r.trigger,
      error: r.error,
    })),
    missed: missed.rows.map(toTimelineMissed),
    watermarkMs: watermark?.getTime() ?? null,
    retainedFromMs: q.retainedFrom?.getTime(),
    limit,
    dstDropped: dstDropped(eras, q.from.getTime(), q.to.getTime()),
  });
  return { ...timeline, eras, watermark };
}

/** Whether the ledger has accounted for `job` at all (an era, under its slot owner). */
export async function hasEras(db: Queryable, t: Tables, job: string): Promise<boolean> {
  const res = await db.query({ ...statements(t).anyEra, values: [slotOwner(job)] });
  return (res.rowCount ?? 0) > 0;
}

/** The newest instant accounted for: the job's last fire or its newest missed instant. */
export async function watermarkOf(db: Queryable, t: Tables, job: string): Promise<Date | null> {
  const [fired, missed] = await Promise.all([
    lastFiredOf(db, t, [job]),
    db.query<{ last_at: Date | null }>({
      ...statements(t).newestMissed,
      values: [job, scheduleIdOf(job) ?? null],
    }),
  ]);
  const a = fired.get(slotOwner(job));
  const b = missed.rows[0]?.last_at ?? undefined;
  if (!a) return b ?? null;
  return b && b > a ? b : a;
}

export interface UnansweredCount {
  /** Unanswered instants over all the jobs looked at. */
  total: number;
  byJob: Map<string, number>;
  /** Jobs whose walk stopped at the per-job limit: their count is a lower bound. */
  truncated: string[];
}

/**
 * The live checker's question: how many due instants of `jobs` (default: every job with a schedule
 * era in the window, a runtime schedule as "/<id>") in [from, to] have no answer (no run, no missed
 * range, at or before the watermark, inside an era). Bounded work per job: a few indexed reads and
 * a walk of at most `perJobLimit` instants. Pass a window that ends at least the jobs' misfire
 * grace before now, or the instants a leader is about to fire are not yet accounted.
 */
export async function countUnanswered(
  db: Queryable,
  t: Tables,
  jobs: readonly string[] | undefined,
  window: { from: Date; to: Date; now: Date },
  perJobLimit = 2_000,
): Promise<UnansweredCount> {
  const out: UnansweredCount = { total: 0, byJob: new Map(), truncated: [] };
  const names = jobs ?? (await accountedJobs(db, t, window));
  for (const job of names) {
    const report = await readOccurrences(db, t, { job, ...window, limit: perJobLimit });
    const n = report.entries.filter((e) => e.outcome === 'unanswered').reduce((sum, e) => sum + e.count, 0);
    if (n > 0) out.byJob.set(job, n);
    out.total += n;
    if (report.truncatedAfterMs !== null) out.truncated.push(job);
  }
  return out;
}

/**
 * Every job with a schedule era overlapping [from, to] (a runtime schedule as "/<id>"), in order; with
 * `page`, only the next `limit` after `after` (the live check walks them a page a round).
 */
export async function accountedJobs(
  db: Queryable,
  t: Tables,
  window: { from: Date; to: Date },
  page?: { after: string; limit: number },
): Promise<string[]> {
  const res = page
    ? await db.query<{ job: string }>({
        ...statements(t).accountedPage,
        values: [window.from, window.to, page.after, page.limit],
      })
    : await db.query<{ job: string }>({ ...statements(t).accounted, values: [window.from, window.to] });
  return res.rows.map((r) => r.job);
}

interface MissedRow {
  first_at: Date;
  last_at: Date;
  count: string | number;
  count_exact: boolean;
  reason: TimelineMissed['reason'];
  outage_start: Date | null;
  outage_end: Date;
  leader_token: string;
  leader_id: string;
}

function toTimelineMissed(r: MissedRow): TimelineMissed {
  return {
    firstMs: r.first_at.getTime(),
    lastMs: r.last_at.getTime(),
    count: Number(r.count),
    exact: r.count_exact,
    reason: r.reason,
    outageStartMs: r.outage_start?.getTime() ?? null,
    outageEndMs: r.outage_end.getTime(),
    leaderToken: r.leader_token,
    leaderId: r.leader_id,
  };
}

/** The wall times each era's DST policy drops within [from, to], ascending. */
function dstDropped(eras: readonly ScheduleEra[], from: number, to: number): number[] {
  return eras.flatMap((e) => {
    const lo = Math.max(from - 1, e.from.getTime());
    const hi = Math.min(to, e.to?.getTime() ?? Infinity);
    return hi > lo ? (scheduleOf(e)?.dstDropped(lo, hi) ?? []) : [];
  });
}

function toTimelineEra(e: ScheduleEra): TimelineEra {
  return {
    fromMs: e.from.getTime(),
    toMs: e.to?.getTime() ?? null,
    schedule: scheduleOf(e),
    expression: e.expression,
    timezone: e.timezone,
  };
}
