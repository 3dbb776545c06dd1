/**
 * The console's numbers per job, from the ledger: the last 24 hours' outcomes and durations, and
 * a per-minute history (fires, failures, lateness p95) per job and for the cluster. Lateness is
 * from the scheduled instant to the first attempt's start: the delay an operator feels. A
 * backfill's runs are left out of it: they fire slots of the past on purpose, so their "lateness"
 * is the age of the range, not a delay (one backfill made a job's p95 7.6 minutes).
 */

/** Runs whose start measures lateness: every trigger but backfill (see above). */
const LATENESS = `trigger <> 'backfill'`;
import type pg from 'pg';
import type { Tables } from '../db/tables.js';

type Db = Pick<pg.Pool, 'query'>;

export interface JobStats {
  lastSuccessAt: string | null;
  /** Runs that settled in the window: completed / (completed + failed). Null when none settled. */
  successRate: number | null;
  completed: number;
  failed: number;
  /** p95 of finished attempts' run time in the window. */
  durationP95Ms: number | null;
  /** p95 of lateness of runs scheduled in the window (backfills left out). */
  latenessP95Ms: number | null;
}

/** Stats over the last `windowMs` (default 24 h) for each job named. */
export async function jobStats(
  db: Db,
  t: Tables,
  jobs: string[],
  windowMs = 24 * 3600 * 1000,
): Promise<Map<string, JobStats>> {
  const res = await db.query<{
    job: string;
    last_success: Date | null;
    completed: number;
    failed: number;
    duration_p95: number | null;
    lateness_p95: number | null;
  }>(
    `WITH w AS (SELECT now() - $2::bigint * interval '1 millisecond' AS since)
     SELECT j.job,
       (SELECT max(finished_at) FROM ${t.runs} WHERE job = j.job AND state = 'completed') AS last_success,
       (SELECT count(*)::int FROM ${t.runs}, w WHERE job = j.job AND state = 'completed' AND finished_at >= w.since) AS completed,
       (SELECT count(*)::int FROM ${t.runs}, w WHERE job = j.job AND state = 'failed' AND finished_at >= w.since) AS failed,
       (SELECT percentile_cont(0.95) WITHIN GROUP (ORDER BY extract(epoch FROM a.finished_at - a.started_at) * 1000)
          FROM ${t.runAttempts} a JOIN ${t.runs} r ON r.id = a.run_id, w
          WHERE r.job = j.job AND a.state IN ('completed', 'failed', 'retrying') AND a.finished_at >= w.since)::float8 AS duration_p95,
       (SELECT percentile_cont(0.95) WITHIN GROUP (ORDER BY extract(epoch FROM started_at - scheduled_at) * 1000)
          FROM ${t.runs}, w WHERE job = j.job AND started_at IS NOT NULL AND scheduled_at >= w.since
            AND ${LATENESS})::float8 AS lateness_p95
     FROM unnest($1::text[]) AS j(job)`,
    [jobs, Math.floor(windowMs)],
  );
  const round = (v: number | null) => (v === null ? null : Math.round(v));
  return new Map(
    res.rows.map((r) => [
      r.job,
      {
        lastSuccessAt: r.last_success?.toISOString() ?? null,
        successRate: r.completed + r.failed === 0 ? null : r.completed / (r.completed + r.failed),
        completed: r.completed,
        failed: r.failed,
        durationP95Ms: round(r.duration_p95),
        latenessP95Ms: round(r.lateness_p95),
      },
    ]),
  );
}

export interface MinuteSeries {
  fires: number[];
  failures: number[];
  /** null for a minute without a started run. */
  latenessP95Ms: (number | null)[];
}

export interface History {
  /** The first minute (ISO); minute i is from + i minutes. */
  from: string;
  minutes: number;
  cluster: MinuteSeries;
  jobs: Record<string, MinuteSeries>;
}

/**
 * Per minute over the last `minutes`: fires (runs by scheduled minute, manual triggers included,
 * skipped ones not), failures (runs that settled failed, by the minute they did) and lateness p95.
 */
export async function minuteHistory(db: Db, t: Tables, minutes: number, job?: string): Promise<History> {
  const res = await db.query<{
    minute: Date;
    job: string | null;
    fires: number;
    failures: number;
    lateness_p95: number | null;
    start: Date;
  }>(
    `WITH b AS (SELECT date_trunc('minute', now()) - ($1::int - 1) * interval '1 minute' AS start),
     ev AS (
       SELECT job, date_trunc('minute', scheduled_at) AS minute, (state <> 'skipped')::int AS fire, 0 AS failure,
              CASE WHEN started_at IS NOT NULL AND ${LATENESS} THEN extract(epoch FROM started_at - scheduled_at) * 1000 END AS late
       FROM ${t.runs}, b WHERE scheduled_at >= b.start AND ($2::text IS NULL OR job = $2)
       UNION ALL
       SELECT job, date_trunc('minute', finished_at), 0, 1, NULL
       FROM ${t.runs}, b WHERE state = 'failed' AND finished_at >= b.start AND ($2::text IS NULL OR job = $2))
     SELECT minute, job, sum(fire)::int AS fires, sum(failure)::int AS failures,
            percentile_cont(0.95) WITHIN GROUP (ORDER BY late)::float8 AS lateness_p95, (SELECT start FROM b)
     FROM ev GROUP BY GROUPING SETS ((minute, job), (minute)) ORDER BY minute`,
    [minutes, job ?? null],
  );
  const start =
    res.rows[0]?.start ??
    (
      await db.query<{ start: Date }>(
        `SELECT date_trunc('minute', now()) - ($1::int - 1) * interval '1 minute' AS start`,
        [minutes],
      )
    ).rows[0]!.start;
  const empty = (): MinuteSeries => ({
    fires: new Array<number>(minutes).fill(0),
    failures: new Array<number>(minutes).fill(0),
    latenessP95Ms: new Array<number | null>(minutes).fill(null),
  });
  const history: History = { from: start.toISOString(), minutes, cluster: empty(), jobs: {} };
  for (const r of res.rows) {
    const i = Math.round((r.minute.getTime() - start.getTime()) / 60_000);
    if (i < 0 || i >= minutes) continue; // a run scheduled in the future (a job's next instant)
    const s = r.job === null ? history.cluster : (history.jobs[r.job] ??= empty());
    s.fires[i] = r.fires;
    s.failures[i] = r.failures;
    s.latenessP95Ms[i] = r.lateness_p95 === null ? null : Math.round(r.lateness_p95);
  }
  return history;
}
