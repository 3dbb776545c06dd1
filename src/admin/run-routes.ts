/**
 * The console's run routes: the whole ledger paged newest first (keyset cursor), one run with
 * every attempt, the per-minute history, and retrying a failed run (token, leader only, fenced).
 */
import { z } from 'zod';
import { NotLeaderError, RunNotFoundError, RunNotRetryableError, StaleTokenError } from '../errors.js';
import { fireTriggers } from '../cron/fire-trigger.js';
import { idempotencyKey, parseIdempotencyKey } from '../jobs/idempotency-key.js';
import { runStates } from '../db/schema.js';
import { pageRuns, runDetail, type RunCursor, type RunPageFilter } from '../ledger/run-reads.js';
import { minuteHistory } from '../ledger/job-stats.js';
import { defineRoute, type AdminRoute } from './admin-route.js';
import { boundText } from './guards.js';
import { HttpError, parse } from './http-error.js';
import { notLeader } from './not-leader.js';
import { MAX_RUN_ID, instant, runId, runParams } from './route-params.js';

/** Scheduled instants in µs since the epoch, within the years 0000-9999 (what `instant` takes). */
const MAX_CURSOR_US = 253_402_300_800_000_000n;
const CURSOR = /^(-?[0-9]{1,19})\.([1-9][0-9]{0,18})$/;
const KEY_HELP =
  'a run id (digits) or an idempotency key (job@2026-01-01T00:00:00.000Z, with #once:<key> for a one-off run, or workflow/run-<id>/<step>)';

/** A page's cursor: the nextCursor of an earlier page, "<scheduled µs>.<run id>". */
const cursor = z.string().transform((v, ctx): RunCursor => {
  const m = CURSOR.exec(v);
  const c = m && { scheduledUs: BigInt(m[1]!), id: BigInt(m[2]!) };
  if (c && c.id <= MAX_RUN_ID && c.scheduledUs <= MAX_CURSOR_US && -c.scheduledUs <= MAX_CURSOR_US) return c;
  ctx.addIssue({ code: 'custom', message: 'must be the nextCursor of an earlier page' });
  return z.NEVER;
});

const runsQuery = z.object({
  job: z.string().min(1).max(200, 'must be at most 200 characters').optional(),
  state: z.enum(runStates, `must be one of ${runStates.join(', ')}`).optional(),
  trigger: z.enum(fireTriggers, `must be one of ${fireTriggers.join(', ')}`).optional(),
  from: instant.optional(),
  to: instant.optional(),
  q: z.string().trim().min(1).max(300, 'must be at most 300 characters').optional(),
  limit: z.coerce
    .number()
    .int('must be a whole number')
    .min(1, 'must be at least 1')
    .max(500, 'must be at most 500')
    .default(50),
  cursor: cursor.optional(),
});
const historyQuery = z.object({
  minutes: z.coerce
    .number()
    .int('must be a whole number')
    .min(5, 'must be at least 5')
    .max(24 * 60, 'must be at most 1440 (24 hours)')
    .default(180),
  job: z.string().min(1).max(200).optional(),
});

export const encodeCursor = (c: RunCursor | null) => (c === null ? null : `${c.scheduledUs}.${c.id}`);

/** ?q=: a run id, or an idempotency key as handlers get it (jobs/idempotency-key.ts). */
function search(q: string | undefined): Pick<RunPageFilter, 'id' | 'slot' | 'step'> {
  if (q === undefined) return {};
  if (/^[0-9]+$/.test(q)) return { id: BigInt(parse(z.object({ q: runId }), { q }).q) };
  const key = parseIdempotencyKey(q);
  if (!key) throw new HttpError(400, 'bad_request', `q: must be ${KEY_HELP}`);
  if (key.kind === 'step') return { step: { workflowRunId: key.workflowRunId, step: key.step, item: key.item } };
  return { slot: { job: key.job, scheduledAt: key.scheduledAt, onceKey: key.onceKey } };
}

export const runRoutes: AdminRoute[] = [
  {
    method: 'GET',
    path: '/api/runs',
    access: 'read',
    summary: 'every run, newest first, a page at a time (`?job=&state=&trigger=&from=&to=&q=&limit=&cursor=`)',
    handle: (c, req) =>
      c.read(req, async () => {
        const q = parse(runsQuery, req.query);
        // No 404 for a job these replicas do not define: a renamed or removed job keeps its history.
        const page = await pageRuns(c.pool, c.reads.tables, {
          job: q.job,
          state: q.state,
          trigger: q.trigger,
          from: q.from === undefined ? undefined : new Date(q.from),
          to: q.to === undefined ? undefined : new Date(q.to),
          ...search(q.q),
          limit: q.limit,
          cursor: q.cursor,
        });
        // Handler text is served bounded, whatever the ledger holds.
        return {
          runs: page.runs.map((r) => ({ ...r, error: boundText(r.error) })),
          nextCursor: encodeCursor(page.nextCursor),
        };
      }),
  },
  defineRoute({
    method: 'GET',
    path: '/api/runs/:id',
    access: 'read',
    summary: 'one run with its idempotency key and every attempt (token, worker, state, times, error)',
    params: runParams,
    handle: (c, req, _reply, { id }) =>
      c.read(req, async () => {
        const run = await runDetail(c.pool, c.reads.tables, BigInt(id));
        if (!run) throw new HttpError(404, 'unknown_run', new RunNotFoundError(BigInt(id)).message);
        return {
          ...run,
          error: boundText(run.error),
          idempotencyKey: idempotencyKey({
            job: run.job,
            scheduledAt: new Date(run.scheduledAt),
            onceKey: run.onceKey,
            workflow:
              run.kind === 'step' && run.workflowRunId !== null && run.step !== null
                ? { runId: run.workflowRunId, step: run.step, item: run.item }
                : null,
          }),
          attempts: run.attempts.map((a) => ({
            ...a,
            error: boundText(a.error),
            errorStack: boundText(a.errorStack),
          })),
        };
      }),
  }),
  {
    method: 'GET',
    path: '/api/history',
    access: 'read',
    summary: 'fires, failures and lateness p95 a minute, for the cluster and per job (`?minutes=5..1440&job=`)',
    handle: (c, req) =>
      c.read(req, async () => {
        const q = parse(historyQuery, req.query);
        return minuteHistory(c.pool, c.reads.tables, q.minutes, q.job);
      }),
  },
  defineRoute({
    method: 'POST',
    path: '/api/runs/:id/retry',
    access: 'token',
    summary:
      'a new attempt of a failed or cancelled run, fenced like a fire (leader only; 409 `not_retryable`, `fenced`)',
    params: runParams,
    // Refusals are 404 / 409 with a code saying which.
    handle: async (c, _req, _reply, { id }) => {
      // Sharded, the run's shard decides who may retry it: the replica answers that, naming its leader.
      if (c.replica.role !== 'leader' && !c.replica.shardLeases) return notLeader(c);
      try {
        const run = await c.replica.retry(BigInt(id));
        c.replica.logger.info({ runId: id, job: run.job }, 'admin: run retried');
        return {
          retried: true,
          runId: id,
          job: run.job,
          scheduledAt: run.scheduledAt.toISOString(),
          previousState: run.previousState,
          leader: c.replica.replicaId,
        };
      } catch (err) {
        if (err instanceof NotLeaderError) return notLeader(c, err.leaseName);
        if (err instanceof RunNotFoundError) throw new HttpError(404, 'unknown_run', err.message);
        if (err instanceof RunNotRetryableError)
          throw new HttpError(409, 'not_retryable', err.message, { state: err.state });
        if (err instanceof StaleTokenError)
          throw new HttpError(
            409,
            'fenced',
            `refused by the fence, nothing changed: ${err.message}; a newer leader exists`,
          );
        throw err;
      }
    },
  }),
];
