/**
 * Workflow runs: the graph of one (its steps, gates, step runs and signals), and an operator's hand
 * on it: cancel, signal. Retry is POST /api/runs/:id/retry, as for any run.
 */
import { z } from 'zod';
import { RunNotFoundError, WorkflowRunError } from '../errors.js';
import { workflowRunView } from '../ledger/workflow-reads.js';
import { defineRoute, type AdminRoute } from './admin-route.js';
import { boundText } from './guards.js';
import { HttpError, parse } from './http-error.js';
import { runId, runParams } from './route-params.js';

const signalName = z
  .string()
  .min(1)
  .max(64, 'must be at most 64 characters')
  .regex(/^[A-Za-z0-9._-]+$/, 'may contain only letters, digits and . _ -');
const signalBody = z.strictObject({ data: z.unknown().optional(), by: z.string().max(200).optional() }).optional();
const cancelBody = z
  .strictObject({ reason: z.string().max(500, 'must be at most 500 characters').optional() })
  .optional();

/** A workflow refusal as the API answers it. */
function refused(err: unknown): never {
  if (err instanceof RunNotFoundError) throw new HttpError(404, 'unknown_run', err.message);
  if (err instanceof WorkflowRunError) throw new HttpError(409, 'workflow_refused', err.message);
  throw err;
}

const signalParams = z.object({ id: runId, name: signalName });

export const workflowRoutes: AdminRoute[] = [
  defineRoute({
    method: 'GET',
    path: '/api/runs/:id/workflow',
    access: 'read',
    summary: "a workflow run's graph: its steps (needs, fan-out), each step's state and runs, its signals",
    params: runParams,
    handle: (c, req, _reply, { id }) =>
      c.read(req, async () => {
        const view = await workflowRunView(c.pool, c.reads.tables, BigInt(id));
        if (!view) throw new HttpError(404, 'unknown_workflow_run', `run ${id} is no started workflow run`);
        return {
          ...view,
          error: boundText(view.error),
          steps: view.steps.map((s) => ({
            ...s,
            reason: boundText(s.reason),
            runs: s.runs.map((r) => ({ ...r, error: boundText(r.error) })),
          })),
        };
      }),
  }),
  defineRoute({
    method: 'POST',
    path: '/api/runs/:id/cancel',
    access: 'token',
    summary: 'cancel an active run; a workflow run with its steps (their late commits refused). JSON body `{"reason"}`',
    params: runParams,
    handle: async (c, req, _reply, { id }) => {
      const body = parse(cancelBody, req.body);
      const reason = `cancelled: ${body?.reason ?? 'by an operator'}`;
      const cancelled = await c.replica.cancel(BigInt(id), reason).catch(refused);
      if (!cancelled) throw new HttpError(409, 'not_active', `run ${id} is not active: nothing to cancel`);
      c.replica.logger.info({ runId: id, reason }, 'admin: run cancelled');
      return { cancelled: true, runId: id };
    },
  }),
  defineRoute({
    method: 'POST',
    path: '/api/runs/:id/signal/:name',
    access: 'token',
    summary:
      'send a workflow run a signal a step may wait for (the first of a name counts). JSON body `{"data", "by"}`',
    params: signalParams,
    handle: async (c, req, _reply, { id, name }) => {
      const body = parse(signalBody, req.body);
      const by = body?.by ? `admin (${body.by})` : 'admin';
      const sent = await c.replica.signal(BigInt(id), name, body?.data ?? null, by).catch(refused);
      c.replica.logger.info({ runId: id, signal: name, accepted: sent.accepted }, 'admin: signal sent');
      return { runId: id, signal: name, ...sent };
    },
  }),
];
