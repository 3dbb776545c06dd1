/**
 * The jobs this replica defines: their status (policies, pause, next fire, last run, 24 h numbers),
 * the preview of their next fires, and the mutations (token): trigger is leader-only, pause and
 * resume work on any replica (the flag lives in the ledger).
 */
import { NotLeaderError } from '../errors.js';
import { lastRuns } from '../ledger/admin-reads.js';
import { defineRoute, type AdminRoute, type RouteContext } from './admin-route.js';
import { boundText } from './guards.js';
import { HttpError } from './http-error.js';
import { jobOverview } from './job-overview.js';
import { pauseFields, pauseRequest, policyFields, previewBody } from './job-policies-view.js';
import { notLeader } from './not-leader.js';
import { jobLease } from './replica-view.js';
import { jobParams } from './route-params.js';

/** The job named in the path; 404 when this replica does not define it. */
function job(c: RouteContext, name: string) {
  const found = c.replica.job(name);
  if (!found) throw new HttpError(404, 'unknown_job', `unknown job "${name}"`);
  return found;
}

export const jobRoutes: AdminRoute[] = [
  {
    method: 'GET',
    path: '/api/jobs',
    access: 'read',
    summary: 'each job: schedule in words, policies, pause, next fires, last run and its 24 h numbers',
    handle: (c, req) => c.read(req, () => jobsStatus(c)),
  },
  defineRoute({
    method: 'GET',
    path: '/api/jobs/:name/next',
    access: 'read',
    summary: "a job's next fires (`?count=1..200`): local time, offset, what the DST policy did, paused",
    params: jobParams,
    handle: (c, req, _reply, { name }) =>
      c.read(req, async () => {
        const found = job(c, name);
        const pauses = await c.reads.fires.pauses();
        return previewBody(found, req.query, c.replica.clock.now(), pauses.get(found.name));
      }),
  }),
  defineRoute({
    method: 'POST',
    path: '/api/jobs/:name/trigger',
    access: 'token',
    summary: 'fire a job now, as a run of its own (leader only; a follower answers 409 naming the leader)',
    params: jobParams,
    handle: async (c, _req, _reply, { name }) => {
      const r = c.replica;
      const found = job(c, name);
      if (r.role !== 'leader') return notLeader(c, jobLease(r, found.name));
      try {
        const fire = await r.trigger(found.name);
        r.logger.info({ job: found.name, runId: fire.runId.toString() }, 'admin: job triggered');
        return {
          triggered: true,
          job: found.name,
          runId: fire.runId.toString(),
          scheduledAt: fire.scheduledAt.toISOString(),
          leader: r.replicaId,
        };
      } catch (err) {
        if (err instanceof NotLeaderError) return notLeader(c, err.leaseName);
        throw err;
      }
    },
  }),
  defineRoute({
    method: 'POST',
    path: '/api/jobs/:name/pause',
    access: 'token',
    summary: 'pause a job, with an optional JSON body `{"reason", "until"}` (any replica)',
    params: jobParams,
    handle: async (c, req, _reply, { name }) => {
      const r = c.replica;
      const found = job(c, name);
      const request = pauseRequest(req.body, req.headers['x-cronwarden-user'], r.clock.now());
      const pause = await r.pause(found.name, request);
      r.logger.info(
        { job: found.name, reason: pause.reason, pausedBy: pause.by, until: pause.until?.toISOString() },
        'admin: job paused',
      );
      return { job: found.name, ...pauseFields(pause, r.clock.now()) };
    },
  }),
  defineRoute({
    method: 'POST',
    path: '/api/jobs/:name/resume',
    access: 'token',
    summary: "resume a job, clearing its pause's reason and expiry (any replica)",
    params: jobParams,
    handle: async (c, _req, _reply, { name }) => {
      const r = c.replica;
      const found = job(c, name);
      await r.setPaused(found.name, false);
      r.logger.info({ job: found.name }, 'admin: job resumed');
      return { job: found.name, paused: false };
    },
  }),
];

/** The body of GET /api/jobs: each defined job with its pause, next fire and last run. */
async function jobsStatus(c: RouteContext) {
  const r = c.replica;
  const jobs = r.jobs();
  const [pauses, last, stats] = await Promise.all([
    c.reads.fires.pauses(),
    lastRuns(
      c.pool,
      c.reads.tables,
      jobs.map((j) => j.name),
    ),
    c.jobStats(),
  ]);
  const now = r.clock.now(); // the scheduler's (ledger's) clock, not this host's
  return {
    jobs: jobs.map((j) => {
      const next = j.schedule.nextAfter(now);
      const lastRun = last.get(j.name) ?? null;
      return {
        name: j.name,
        schedule: j.schedule.expression,
        timezone: j.schedule.timezone,
        misfire: j.misfire,
        overlap: j.overlap,
        ...policyFields(j),
        ...pauseFields(pauses.get(j.name), now),
        nextFireAt: next === null ? null : new Date(next).toISOString(),
        // Handler text is served bounded, whatever the ledger holds.
        lastRun: lastRun && { ...lastRun, error: boundText(lastRun.error) },
        ...jobOverview(j, now, stats.get(j.name)),
        ...(j.workflowSteps ? { workflow: { steps: j.workflowSteps } } : {}),
      };
    }),
  };
}
