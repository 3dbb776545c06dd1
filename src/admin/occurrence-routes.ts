/**
 * "Why did my job not run?": every due instant of a job in a range, with what happened and why
 * (docs/concepts/occurrences.md). A job is known if this replica defines it or the ledger has
 * accounted for it (a runtime schedule by its `<handler>/<id>`, a removed job's history).
 */
import { z } from 'zod';
import { occurrenceText } from '../cron/occurrence-text.js';
import type { OccurrenceEntry } from '../cron/occurrence-timeline.js';
import { hasEras, readOccurrences, type OccurrenceReport } from '../ledger/occurrence-reads.js';
import { defineRoute, type AdminRoute } from './admin-route.js';
import { boundText } from './guards.js';
import { HttpError, parse } from './http-error.js';
import { instant, jobParams } from './route-params.js';

const HOUR_MS = 3_600_000;
/** The longest range one request may ask about. */
export const MAX_OCCURRENCE_RANGE_MS = 31 * 24 * HOUR_MS;

const occurrencesQuery = z.object({
  from: instant.optional(),
  to: instant.optional(),
});

/** [from, to] from the query: default the hour before `to`, `to` default now; 400 when reversed or too long. */
export function occurrenceRange(query: unknown, nowMs: number): { from: number; to: number } {
  const q = parse(occurrencesQuery, query);
  const to = q.to === undefined ? nowMs : Date.parse(q.to);
  const from = q.from === undefined ? to - HOUR_MS : Date.parse(q.from);
  if (to < from) throw new HttpError(400, 'bad_request', 'to: must not be before from');
  if (to - from > MAX_OCCURRENCE_RANGE_MS)
    throw new HttpError(
      400,
      'bad_request',
      `to: the range may span at most ${MAX_OCCURRENCE_RANGE_MS / HOUR_MS / 24} days`,
    );
  return { from, to };
}

export const occurrenceRoutes: AdminRoute[] = [
  defineRoute({
    method: 'GET',
    path: '/api/jobs/:name/occurrences',
    access: 'read',
    summary:
      'what happened at each due instant of a job in `?from=&to=` (default the last hour, at most 31 days), and why',
    params: jobParams,
    handle: (c, req, _reply, { name }) =>
      c.read(req, async () => {
        const now = c.replica.clock.now();
        const { from, to } = occurrenceRange(req.query, now);
        const found = c.replica.job(name);
        if (!found && !(await hasEras(c.pool, c.reads.tables, name)))
          throw new HttpError(404, 'unknown_job', `unknown job "${name}": not defined here and never accounted for`);
        const report = await readOccurrences(c.pool, c.reads.tables, {
          job: name,
          from: new Date(from),
          to: new Date(to),
          now: new Date(now),
          currentSchedule: found?.schedule,
          // A hole older than retention is a run retention deleted, not an instant nobody answered.
          retainedFrom: retainedFrom(c.replica.retentionMs, now),
        });
        return occurrencesBody(name, { from, to, now }, report);
      }),
  }),
];

const iso = (ms: number) => new Date(ms).toISOString();

/** Runs finished before this may be gone (retention counts from a run's commit: a little after its instant). */
function retainedFrom(retentionMs: number | undefined, nowMs: number): Date | undefined {
  return retentionMs === undefined || retentionMs <= 0 ? undefined : new Date(nowMs - retentionMs);
}

export function occurrencesBody(
  job: string,
  range: { from: number; to: number; now: number },
  report: OccurrenceReport,
) {
  return {
    job,
    from: iso(range.from),
    to: iso(range.to),
    now: iso(range.now),
    watermark: report.watermark?.toISOString() ?? null,
    eras: report.eras.map((e) => ({
      schedule: e.expression,
      timezone: e.timezone,
      dst: e.dst,
      from: e.from.toISOString(),
      to: e.to?.toISOString() ?? null,
      leaderToken: e.leaderToken.toString(),
      leaderId: e.leaderId,
    })),
    entries: report.entries.map(entryBody),
    examined: report.examined,
    truncatedAfter: report.truncatedAfterMs === null ? null : iso(report.truncatedAfterMs),
  };
}

function entryBody(e: OccurrenceEntry) {
  return {
    outcome: e.outcome,
    first: iso(e.firstMs),
    last: iso(e.lastMs),
    count: e.count,
    exact: e.exact,
    text: boundText(occurrenceText(e)),
    ...(e.run && { run: e.run }),
    ...(e.skip && { skip: { reason: e.skip.reason, text: boundText(e.skip.text) } }),
    ...(e.missed && {
      missed: {
        reason: e.missed.reason,
        outageStart: e.missed.outageStartMs === null ? null : iso(e.missed.outageStartMs),
        outageEnd: iso(e.missed.outageEndMs),
        leaderToken: e.missed.leaderToken,
        leaderId: e.missed.leaderId,
      },
    }),
    ...(e.notAccounted && {
      notAccounted: {
        since: e.notAccounted.sinceMs === null ? null : iso(e.notAccounted.sinceMs),
        why: e.notAccounted.why,
      },
    }),
  };
}
