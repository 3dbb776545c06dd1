/**
 * The admin API's side of the policies a job chooses (issue 16): what /api/jobs shows of them,
 * the body of POST /api/jobs/:name/pause, and the preview of GET /api/jobs/:name/next.
 */
import { z } from 'zod';
import type { CodeJob } from '../cron/scheduled-job.js';
import { pauseHolds, type JobPause, type PauseRequest } from '../ledger/pauses.js';
import { previewFires, type PreviewEntry } from '../cron/schedule-preview.js';

/** Longest pause reason accepted (characters). */
export const MAX_PAUSE_REASON = 500;
/** Most instants one preview lists. */
export const MAX_PREVIEW = 200;

/** A 4xx the admin server's error handler answers with this message. */
class BadRequest extends Error {
  readonly statusCode = 400;
}

const pauseBody = z
  .strictObject({
    reason: z
      .string('must be a string')
      .trim()
      .min(1, 'must not be empty')
      .max(MAX_PAUSE_REASON, `must be at most ${MAX_PAUSE_REASON} characters`)
      // eslint-disable-next-line no-control-regex
      .regex(/^[^\u0000-\u001f\u007f]*$/, 'must be one line without control characters')
      .optional(),
    until: z
      .string('must be an ISO-8601 instant such as "2026-12-01T09:00:00Z"')
      .regex(
        /^\d{4}-\d\d-\d\dT\d\d:\d\d(:\d\d(\.\d{1,3})?)?(Z|[+-]\d\d:\d\d)$/,
        'must be an ISO-8601 instant with a zone, such as "2026-12-01T09:00:00Z" or "2026-12-01T10:00:00+01:00"',
      )
      .refine((v) => !Number.isNaN(Date.parse(v)), 'is not a real date')
      .optional(),
  })
  .nullish();

/** "x-cronwarden-user": the CLI sends the local user name, recorded next to "admin". */
const userHeader = /^[A-Za-z0-9._@-]{1,64}$/;

/**
 * The pause a POST /api/jobs/:name/pause asks for. Tokens have no names, so who paused it is
 * "admin", with the CLI's user name when it sent one (an operator's note, not an identity).
 * `until` must be in the future on the scheduler's clock.
 */
export function pauseRequest(body: unknown, userHeaderValue: unknown, nowMs: number): PauseRequest {
  const parsed = pauseBody.safeParse(body ?? undefined);
  if (!parsed.success) {
    const issue = parsed.error.issues[0]!;
    throw new BadRequest(`${issue.path.join('.') || 'body'}: ${issue.message}`);
  }
  const until = parsed.data?.until === undefined ? null : new Date(Date.parse(parsed.data.until));
  if (until !== null && until.getTime() <= nowMs)
    throw new BadRequest(
      `until: must be in the future (it is ${until.toISOString()}, now is ${new Date(nowMs).toISOString()})`,
    );
  const user = typeof userHeaderValue === 'string' && userHeader.test(userHeaderValue) ? userHeaderValue : null;
  return { reason: parsed.data?.reason ?? null, by: user ? `admin (${user})` : 'admin', until };
}

/** A pause as /api/jobs and the pause answer show it; `paused` is false once `until` has passed. */
export function pauseFields(pause: JobPause | undefined, nowMs: number) {
  const holds = pause !== undefined && pauseHolds(pause, new Date(nowMs));
  return {
    paused: holds,
    pausedReason: holds ? pause.reason : null,
    pausedBy: holds ? pause.by : null,
    pausedAt: holds ? (pause.at?.toISOString() ?? null) : null,
    pausedUntil: holds ? (pause.until?.toISOString() ?? null) : null,
  };
}

/** The policies a job chose, with their defaults filled in. */
export function policyFields(j: CodeJob) {
  return {
    dstRepeat: j.schedule.dst.repeat,
    dstGap: j.schedule.dst.gap,
    catchUpWindowMs: j.catchUpWindowMs,
    maxCatchUp: j.maxCatchUp,
    overlapQueueMax: j.overlapQueueMax,
  };
}

const previewQuery = z.object({
  count: z.coerce
    .number()
    .int('must be a whole number')
    .min(1, 'must be at least 1')
    .max(MAX_PREVIEW, `must be at most ${MAX_PREVIEW}`)
    .default(20),
});

/** The body of GET /api/jobs/:name/next: the next fires, each marked if a pause would skip it. */
export function previewBody(j: CodeJob, query: unknown, nowMs: number, pause: JobPause | undefined) {
  const q = previewQuery.safeParse(query ?? {});
  if (!q.success) {
    const issue = q.error.issues[0]!;
    throw new BadRequest(`${issue.path.join('.') || 'query'}: ${issue.message}`);
  }
  const fires: (PreviewEntry & { paused: boolean })[] = previewFires(j.schedule, nowMs, q.data.count).map((e) => ({
    ...e,
    paused: pause !== undefined && pauseHolds(pause, new Date(e.at)),
  }));
  return {
    job: j.name,
    schedule: j.schedule.expression,
    timezone: j.schedule.timezone,
    ...policyFields(j),
    ...pauseFields(pause, nowMs),
    from: new Date(nowMs).toISOString(),
    fires,
  };
}
