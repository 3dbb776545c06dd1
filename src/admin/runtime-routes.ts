/**
 * The admin API of runtime schedules, one-off runs and backfills. Reads are open (and capped like
 * every read); changes need the bearer token. Schedule changes work on any replica; one-off runs
 * and backfills are the leader's (a follower answers 409 with the leader's URL, as for trigger).
 */
import { z } from 'zod';
import { InvalidArgumentError, NotLeaderError, ScheduleExistsError, ScheduleNotFoundError } from '../errors.js';
import { onceKeySchema, payloadSchema } from '../jobs/payload.js';
import type { StoredSchedule } from '../ledger/schedule-ledger.js';
import { lastRuns } from '../ledger/admin-reads.js';
import { CronSchedule } from '../cron/cron-schedule.js';
import { runtimeJobName } from '../scheduler/schedules/runtime-schedules.js';
import { MAX_BACKFILL_LIMIT, MAX_BACKFILL_RATE } from '../scheduler/firing/backfill.js';
import { defineRoute, type AdminRoute, type RouteContext } from './admin-route.js';
import { boundText } from './guards.js';
import { HttpError, parse } from './http-error.js';
import { notLeader } from './not-leader.js';
import { jobLease, type RuntimeAdmin } from './replica-view.js';
import { instant, jobParams, scheduleParams } from './route-params.js';

/** Who made a change: the admin bearer token has one name. */
const ACTOR = 'admin';

const listQuery = z.object({
  handler: z.string().max(200).optional(),
  deleted: z.enum(['0', '1', 'true', 'false']).optional(),
  limit: z.coerce
    .number()
    .int('must be a whole number')
    .min(1, 'must be at least 1')
    .max(5000, 'must be at most 5000')
    .default(1000),
  after: z.string().min(1).max(128, 'must be the nextAfter of an earlier page').optional(),
});
const onceBody = z.strictObject({
  key: onceKeySchema,
  at: instant.optional(),
  payload: payloadSchema.optional(),
});
const backfillBody = z.strictObject({
  from: instant,
  to: instant,
  limit: z.number().int().min(1).max(MAX_BACKFILL_LIMIT).optional(),
  rate: z.number().int().min(1).max(MAX_BACKFILL_RATE).optional(),
});

export const runtimeRoutes: AdminRoute[] = [
  {
    method: 'GET',
    path: '/api/schedules',
    access: 'read',
    summary:
      'runtime schedules by id with next fire and last run, a page at a time (`?handler=&deleted=1&limit=&after=`; `nextAfter`)',
    handle: (c, req) =>
      c.read(req, async () => {
        const q = parse(listQuery, req.query);
        const list = await c.reads.schedules.list({
          handler: q.handler,
          includeDeleted: q.deleted === '1' || q.deleted === 'true',
          limit: q.limit + 1, // one more than asked: whether there is a next page at all
          after: q.after,
        });
        const page = list.slice(0, q.limit);
        const last = await lastRuns(
          c.pool,
          c.reads.tables,
          page.map((s) => runtimeJobName(s.handler, s.id)),
        );
        return {
          schedules: page.map((s) => {
            const run = last.get(runtimeJobName(s.handler, s.id));
            // Handler text is served bounded, whatever the ledger holds.
            return { ...view(s, c.replica.clock.now()), lastRun: run ? { ...run, error: boundText(run.error) } : null };
          }),
          // Keyset paging: the next page is the schedules after this id (null: this was the last).
          nextAfter: list.length > q.limit ? page[page.length - 1]!.id : null,
        };
      }),
  },
  defineRoute({
    method: 'GET',
    path: '/api/schedules/:id',
    access: 'read',
    summary: 'one runtime schedule with every version (who changed what, when)',
    params: scheduleParams,
    handle: (c, req, _reply, { id }) =>
      c.read(req, async () => {
        const s = await c.reads.schedules.get(id);
        if (!s) throw new HttpError(404, 'unknown_schedule', `no runtime schedule "${id}"`);
        return { schedule: view(s, c.replica.clock.now()), versions: await c.reads.schedules.versions(id) };
      }),
  }),
  {
    method: 'POST',
    path: '/api/schedules',
    access: 'token',
    summary: 'create a runtime schedule (any replica; 409 `schedule_exists`)',
    handle: async (c, req, reply) => {
      const body = (req.body ?? {}) as Record<string, unknown>;
      const { id, ...input } = body;
      const s = await refuse(() => ops(c).create(typeof id === 'string' ? id : '', input, ACTOR));
      return reply.code(201).send({ schedule: view(s, c.replica.clock.now()) });
    },
  },
  defineRoute({
    method: 'PATCH',
    path: '/api/schedules/:id',
    access: 'token',
    summary: 'change a runtime schedule: the fields given, laid over its current version (any replica)',
    params: scheduleParams,
    handle: async (c, req, _reply, { id }) => ({
      schedule: view(await refuse(() => ops(c).update(id, req.body ?? {}, ACTOR)), c.replica.clock.now()),
    }),
  }),
  ...(['pause', 'resume'] as const).map((action) =>
    defineRoute({
      method: 'POST',
      path: `/api/schedules/:id/${action}`,
      access: 'token',
      summary: `${action} a runtime schedule, as a new version (any replica)`,
      params: scheduleParams,
      handle: async (c, _req, _reply, { id }) => {
        const s = await refuse(() => ops(c).setPaused(id, action === 'pause', ACTOR));
        return { schedule: view(s, c.replica.clock.now()) };
      },
    }),
  ),
  defineRoute({
    method: 'DELETE',
    path: '/api/schedules/:id',
    access: 'token',
    summary: 'delete a runtime schedule; its versions stay (any replica)',
    params: scheduleParams,
    handle: async (c, _req, _reply, { id }) => ({
      schedule: view(await refuse(() => ops(c).delete(id, ACTOR)), c.replica.clock.now()),
    }),
  }),
  defineRoute({
    method: 'POST',
    path: '/api/jobs/:name/once',
    access: 'token',
    summary: 'a one-off run of a job, once per `key` (leader only; a follower answers 409 naming the leader)',
    params: jobParams,
    handle: async (c, req, reply, { name }) => {
      const b = parse(onceBody, req.body);
      if (c.replica.role !== 'leader') return notLeader(c, jobLease(c.replica, name));
      const at = b.at ? new Date(b.at) : new Date(c.replica.clock.now());
      const run = await refuse(() => ops(c).once(name, { at, key: b.key, payload: b.payload ?? null }), c);
      return reply.code(run.created ? 201 : 200).send({
        job: run.job,
        runId: run.runId.toString(),
        scheduledAt: run.scheduledAt.toISOString(),
        state: run.state,
        key: b.key,
        created: run.created,
        leader: c.replica.replicaId,
      });
    },
  }),
  defineRoute({
    method: 'POST',
    path: '/api/jobs/:name/backfill',
    access: 'token',
    summary: "fire a job's slots from `from` to `to`, a step at a time (leader only; a follower answers 409)",
    params: jobParams,
    handle: async (c, req, _reply, { name }) => {
      const b = parse(backfillBody, req.body);
      if (c.replica.role !== 'leader') return notLeader(c, jobLease(c.replica, name));
      const step = await refuse(
        () =>
          ops(c).backfill({
            job: name,
            from: new Date(b.from),
            to: new Date(b.to),
            limit: b.limit,
            ratePerSec: b.rate,
          }),
        c,
      );
      return { ...step, next: step.next?.toISOString() ?? null, leader: c.replica.replicaId };
    },
  }),
];

function ops(c: RouteContext): RuntimeAdmin {
  if (!c.replica.runtime) throw new HttpError(404, 'not_found', 'runtime schedules are not served here');
  return c.replica.runtime;
}

/** The library's refusals as HTTP: bad input 400, unknown 404, a taken id 409, not the leader 409. */
async function refuse<T>(fn: () => Promise<T>, c?: RouteContext): Promise<T> {
  try {
    return await fn();
  } catch (err) {
    if (err instanceof NotLeaderError && c) return notLeader(c, err.leaseName);
    if (err instanceof ScheduleNotFoundError) throw new HttpError(404, 'unknown_schedule', err.message);
    if (err instanceof ScheduleExistsError) throw new HttpError(409, 'schedule_exists', err.message);
    if (err instanceof InvalidArgumentError) throw new HttpError(400, 'bad_request', err.message);
    throw err;
  }
}

function view(s: StoredSchedule, now: number) {
  let next: number | null = null;
  if (!s.paused && !s.deletedAt) next = CronSchedule.parse(s.cron, s.timezone).nextAfter(now);
  return {
    id: s.id,
    handler: s.handler,
    job: runtimeJobName(s.handler, s.id),
    schedule: s.cron,
    timezone: s.timezone,
    misfire: s.misfire,
    overlap: s.overlap,
    catchUpWindowMs: s.catchUpWindowMs,
    misfireGraceMs: s.misfireGraceMs,
    payload: s.payload,
    paused: s.paused,
    version: s.version,
    updatedAt: s.updatedAt.toISOString(),
    createdAt: s.createdAt.toISOString(),
    deletedAt: s.deletedAt?.toISOString() ?? null,
    nextFireAt: next === null ? null : new Date(next).toISOString(),
  };
}
