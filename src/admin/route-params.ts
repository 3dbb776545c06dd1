/**
 * What the admin routes take in a path or a query, each kind defined once: a route names its
 * path parameters' schema in `params` (admin-route.ts) and the server refuses a request whose
 * parameters do not parse (400) before the handler runs. Every value that reaches a query is
 * bounded here to what PostgreSQL can hold (a bigint run id, a timestamptz instant), so a bad one
 * is a 400 naming the field, never a database error answered 500.
 */
import { z } from 'zod';
import { scheduleId } from '../jobs/schedule-input.js';

/** Run ids are PostgreSQL bigint. */
export const MAX_RUN_ID = 2n ** 63n - 1n;
const RUN_ID = /^[1-9][0-9]{0,18}$/;

/** A run id: digits, 1 to 2^63 - 1. */
export const runId = z.string().superRefine((v, ctx) => {
  if (!RUN_ID.test(v)) ctx.addIssue({ code: 'custom', message: 'must be a run id (digits)' });
  else if (BigInt(v) > MAX_RUN_ID)
    ctx.addIssue({ code: 'custom', message: `must be a run id (at most ${MAX_RUN_ID})` });
});

/** A job's name as the routes take it: from code, or a runtime schedule's `<handler>/<id>`. */
export const jobName = z
  .string()
  .regex(/^[A-Za-z0-9._:@/-]{1,300}$/, 'must be a job name: 1-300 letters, digits or . _ : @ / -');

/**
 * An instant with its zone, in years 0000-9999 (ISO 8601, e.g. 2026-01-01T00:00:00Z): JavaScript
 * dates reach year ±275760, PostgreSQL's timestamptz does not.
 */
export const instant = z.iso.datetime({
  offset: true,
  message: 'must be an ISO 8601 instant, e.g. 2026-01-01T00:00:00Z',
});

export const runParams = z.object({ id: runId });
export const jobParams = z.object({ name: jobName });
export const scheduleParams = z.object({ id: scheduleId });
