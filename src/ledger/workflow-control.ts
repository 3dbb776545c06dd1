/**
 * An operator's hand on a workflow run, and the waits' timeouts: cancel, retry from the failed
 * steps, a signal. Each is one transaction that locks the workflow run's row first, like every
 * change to its progress (workflow-steps.ts).
 */
import type pg from 'pg';
import { RunNotFoundError, WorkflowRunError } from '../errors.js';
import type { Tables } from '../db/tables.js';
import { namedStatement, perSchema } from './named-statement.js';
import { ACTIVE_SQL, openRunsOf } from './run-states.js';
import { cancelledAttempts } from './attempt-rows.js';
import { withTransaction } from './transaction.js';
import type { WorkflowGraph } from './workflow-graph.js';
import { failGate, lockWorkflowRun, makeReady, needDone, type ReadyStepRun } from './workflow-steps.js';
import { failWorkflowRun } from './workflow-runs.js';

/** The workflow graph a started workflow run is pinned to, if this replica defines it. */
export type GraphOf = (workflow: string, fingerprint: string) => WorkflowGraph | undefined;

const statements = perSchema((t) => ({
  /** Running workflow runs whose "<workflow>@<fingerprint>" is not in $1, older than $2 ms. */
  undefinedRuns: namedStatement(
    'workflow_runs_of_undefined_definitions',
    `SELECT r.id, r.job || '@' || (r.result ->> 'definition') AS definition FROM ${openRunsOf(t, 'r')}
     WHERE r.kind = 'workflow' AND r.state = 'running' AND r.job || '@' || (r.result ->> 'definition') <> ALL($1::text[])
       AND r.created_at < now() - $2::bigint * interval '1 millisecond'`,
  ),
  pinnedTo: namedStatement(
    'workflow_fingerprint',
    `SELECT kind, result ->> 'definition' AS fingerprint FROM ${t.runs} WHERE id = $1`,
  ),
  /**
   * End workflow run $1 as $3 ('cancelled', or 'failed' when its definition is gone) with reason $2,
   * and cancel its active step runs (fenced: a new token each).
   */
  cancel: namedStatement(
    'cancel_workflow_run',
    `WITH run AS (
       UPDATE ${t.runs} SET state = $3, finished_at = now(), error = $2
       WHERE id = $1 AND state IN ${ACTIVE_SQL} RETURNING id),
     claims AS (
       SELECT id, attempts, claim_token, claimed_by, claimed_at FROM ${t.runs}
       WHERE workflow_run_id = $1 AND state IN ${ACTIVE_SQL} AND EXISTS (SELECT 1 FROM run) FOR UPDATE),
     steps AS (
       UPDATE ${t.runs} r SET state = 'cancelled', finished_at = now(), claim_token = nextval(${t.executionTokenSeq}),
         error = $2
       FROM claims c WHERE r.id = c.id AND r.state IN ${ACTIVE_SQL}
       RETURNING r.id),
     attempts AS (
       ${cancelledAttempts(t, 'claims', '$2')}),
     gates AS (
       UPDATE ${t.workflowSteps} SET state = 'cancelled', reason = $2, completed_at = now()
       WHERE workflow_run_id = $1 AND state IN ('waiting', 'ready') AND EXISTS (SELECT 1 FROM run))
     SELECT (SELECT count(*) FROM run)::int AS cancelled, array(SELECT id::text FROM steps) AS steps`,
  ),
  /** Workflow run $1 back to running; its failed and cancelled step runs back to pending. */
  reopen: namedStatement(
    'reopen_workflow_run',
    `WITH run AS (
       UPDATE ${t.runs} SET state = 'running', finished_at = NULL, error = NULL
       WHERE id = $1 AND state IN ('failed', 'cancelled') RETURNING id)
     UPDATE ${t.runs} SET state = 'pending', finished_at = NULL, error = NULL, failures = 0, available_at = NULL,
       enqueued_at = NULL, claimed_by = NULL
     WHERE workflow_run_id = $1 AND state IN ('failed', 'cancelled') AND EXISTS (SELECT 1 FROM run)
     RETURNING id, job, scheduled_at, attempts`,
  ),
  /** Per step of run $1: its gate's state and its runs (total, completed). */
  progress: namedStatement(
    'workflow_progress',
    `SELECT g.step, g.state, g.waits_for,
       (SELECT count(*)::int FROM ${t.runs} r WHERE r.workflow_run_id = g.workflow_run_id AND r.step = g.step) AS runs,
       (SELECT count(*)::int FROM ${t.runs} r WHERE r.workflow_run_id = g.workflow_run_id AND r.step = g.step
          AND r.state IN ('completed', 'superseded')) AS done
     FROM ${t.workflowSteps} g WHERE g.workflow_run_id = $1`,
  ),
  /** Set step $2 of run $1 to state $3, needs left $4, items left $5 (NULL: keep), reason and end cleared. */
  resetGate: namedStatement(
    'reset_workflow_gate',
    `UPDATE ${t.workflowSteps} SET state = $3, needs_left = $4, items_left = COALESCE($5, items_left), reason = NULL,
       completed_at = CASE WHEN $3 = 'completed' THEN COALESCE(CASE WHEN state = 'completed' THEN completed_at END, now()) END,
       timeout_at = CASE WHEN $3 = 'waiting' AND $6::bigint IS NOT NULL THEN now() + $6::bigint * interval '1 millisecond' END
     WHERE workflow_run_id = $1 AND step = $2`,
  ),
  signalsOf: namedStatement('workflow_signal_names', `SELECT name FROM ${t.signals} WHERE workflow_run_id = $1`),
  signal: namedStatement(
    'send_workflow_signal',
    `INSERT INTO ${t.signals} (workflow_run_id, name, payload, sent_by) VALUES ($1, $2, $3::jsonb, $4)
     ON CONFLICT (workflow_run_id, name) DO NOTHING RETURNING sent_at`,
  ),
  waiting: namedStatement(
    'workflow_gates_waiting_for',
    `SELECT step FROM ${t.workflowSteps} WHERE workflow_run_id = $1 AND waits_for = $2 AND state = 'waiting'
     ORDER BY step`,
  ),
  /** Up to $1 waits past their timeout: the workflow run, its job, the step. */
  timedOut: namedStatement(
    'workflow_waits_timed_out',
    `SELECT g.workflow_run_id, g.step, g.waits_for, r.job, r.result ->> 'definition' AS fingerprint
     FROM ${t.workflowSteps} g JOIN ${t.runs} r ON r.id = g.workflow_run_id
     WHERE g.state = 'waiting' AND g.timeout_at IS NOT NULL AND g.timeout_at < now() AND r.state = 'running'
     ORDER BY g.timeout_at LIMIT $1`,
  ),
  gateTimedOut: namedStatement(
    'workflow_gate_timed_out',
    `UPDATE ${t.workflowSteps} SET timeout_at = NULL
     WHERE workflow_run_id = $1 AND step = $2 AND state = 'waiting' AND timeout_at < now() RETURNING step`,
  ),
}));

/** Cancel workflow run `id` and its active steps; returns whether it was active, and the step runs cancelled. */
export async function cancelWorkflow(
  pool: pg.Pool,
  t: Tables,
  holdMs: number,
  id: bigint,
  reason: string,
): Promise<{ cancelled: boolean; steps: bigint[] }> {
  return withTransaction(pool, async (client) => {
    if (!(await lockWorkflowRun(client, t, holdMs, id))) return { cancelled: false, steps: [] };
    const res = await client.query<{ cancelled: number; steps: string[] }>({
      ...statements(t).cancel,
      values: [id.toString(), reason, 'cancelled'],
    });
    const row = res.rows[0]!;
    return { cancelled: row.cancelled === 1, steps: row.steps.map(BigInt) };
  });
}

/**
 * Workflow runs started with a definition no live replica has any more (every replica that had it
 * is gone, `defined` being what the live ones define), older than `graceMs`: each fails with the
 * reason (a retry on a replica with that definition resumes it), its active steps cancelled.
 */
export async function failUndefinedWorkflows(
  pool: pg.Pool,
  t: Tables,
  holdMs: number,
  defined: readonly string[],
  graceMs: number,
): Promise<{ runId: bigint; definition: string; steps: bigint[] }[]> {
  const orphans = await pool.query<{ id: string; definition: string }>({
    ...statements(t).undefinedRuns,
    values: [[...defined], Math.floor(graceMs)],
  });
  const failed: { runId: bigint; definition: string; steps: bigint[] }[] = [];
  for (const o of orphans.rows) {
    const reason = `definition ${o.definition} is defined by no live replica (its code changed or was removed)`;
    const ended = await withTransaction(pool, async (client) => {
      await lockWorkflowRun(client, t, holdMs, BigInt(o.id));
      const res = await client.query<{ cancelled: number; steps: string[] }>({
        ...statements(t).cancel,
        values: [o.id, reason, 'failed'],
      });
      return res.rows[0]!;
    });
    if (ended.cancelled === 1)
      failed.push({ runId: BigInt(o.id), definition: o.definition, steps: ended.steps.map(BigInt) });
  }
  return failed;
}

/**
 * Resume a failed or cancelled workflow run from where it stopped: its failed and cancelled step
 * runs run again (a new attempt each, with their retries anew), the steps never made are made when
 * their needs are complete; completed steps are not run again and their results are used as they
 * are. Only on the graph the run was started with (`graph` must have its fingerprint).
 */
export async function retryWorkflow(
  pool: pg.Pool,
  t: Tables,
  holdMs: number,
  id: bigint,
  graphOf: GraphOf,
): Promise<ReadyStepRun[]> {
  return withTransaction(pool, async (client) => {
    const run = await lockWorkflowRun(client, t, holdMs, id);
    if (!run) throw new RunNotFoundError(id);
    const graph = await pinnedGraph(client, t, id, run.job, graphOf);
    if (run.state !== 'failed' && run.state !== 'cancelled')
      throw new WorkflowRunError(id, `workflow run ${id} is ${run.state}: only a failed or cancelled one resumes`);
    const s = statements(t);
    const reopened = await client.query<{ id: string; job: string; scheduled_at: Date; attempts: number }>({
      ...s.reopen,
      values: [id.toString()],
    });
    run.state = 'running';
    const received = new Set(
      (await client.query<{ name: string }>({ ...s.signalsOf, values: [id.toString()] })).rows.map((r) => r.name),
    );
    const gates = new Map(
      (
        await client.query<{ step: string; state: string; runs: number; done: number }>({
          ...s.progress,
          values: [id.toString()],
        })
      ).rows.map((g) => [g.step, g]),
    );
    // Definition order: each step after its needs, so a need's new state is known when it is read.
    const completed = new Set<string>();
    for (const step of graph.steps) {
      const g = gates.get(step.name);
      if (!g) continue;
      if (g.state === 'completed' || (g.runs > 0 && g.runs === g.done)) {
        completed.add(step.name);
        await client.query({ ...s.resetGate, values: [id.toString(), step.name, 'completed', 0, 0, null] });
      } else if (g.runs > 0) {
        await client.query({ ...s.resetGate, values: [id.toString(), step.name, 'ready', 0, g.runs - g.done, null] });
      } else {
        const waits = step.signal && !received.has(step.signal.name) ? step.signal : undefined;
        const needsLeft = step.needs.filter((n) => !completed.has(n)).length + (waits ? 1 : 0);
        await client.query({
          ...s.resetGate,
          values: [id.toString(), step.name, 'waiting', needsLeft, null, waits ? Math.floor(waits.timeoutMs) : null],
        });
      }
    }
    const made: ReadyStepRun[] = reopened.rows.map((r) => ({
      runId: BigInt(r.id),
      job: r.job,
      scheduledAt: r.scheduled_at,
      availableAt: null,
      attempts: r.attempts,
    }));
    for (const step of graph.steps) {
      const g = gates.get(step.name);
      if (!g || completed.has(step.name) || g.runs > 0) continue;
      const waits = step.signal && !received.has(step.signal.name);
      if (step.needs.every((n) => completed.has(n)) && !waits)
        made.push(...(await makeReady(client, t, graph, run, step.name)));
    }
    return made;
  });
}

/**
 * Send signal `name` with `payload` to workflow run `id`: the first of a name counts, a second
 * changes nothing (accepted: false). A step waiting for it becomes ready when its needs are done
 * too; a signal sent before the step waits is kept for it.
 */
export async function signalWorkflow(
  pool: pg.Pool,
  t: Tables,
  holdMs: number,
  id: bigint,
  o: { name: string; payload: unknown; by: string },
  graphOf: GraphOf,
): Promise<{ accepted: boolean; made: ReadyStepRun[] }> {
  return withTransaction(pool, async (client) => {
    const run = await lockWorkflowRun(client, t, holdMs, id);
    if (!run) throw new RunNotFoundError(id);
    const sent = await client.query({
      ...statements(t).signal,
      values: [id.toString(), o.name, JSON.stringify(o.payload ?? null), o.by],
    });
    if (sent.rowCount !== 1) return { accepted: false, made: [] };
    const pinned = await client.query<{ kind: string; fingerprint: string | null }>({
      ...statements(t).pinnedTo,
      values: [id.toString()],
    });
    if (run.state !== 'running' || pinned.rows[0]?.kind !== 'workflow') return { accepted: true, made: [] };
    const waiting = await client.query<{ step: string }>({ ...statements(t).waiting, values: [id.toString(), o.name] });
    if (waiting.rows.length === 0) return { accepted: true, made: [] };
    const graph = await pinnedGraph(client, t, id, run.job, graphOf);
    const made: ReadyStepRun[] = [];
    for (const { step } of waiting.rows) made.push(...(await needDone(client, t, graph, run, step)));
    return { accepted: true, made };
  });
}

/**
 * Waits past their timeout (at most `limit`): a step whose wait may not go on ('fail') fails the
 * workflow run; one that may ('continue') goes on as if the signal had come, and its handler sees
 * that it timed out. Waits of runs whose graph this replica does not define are left for one that does.
 */
export async function timeOutWaits(
  pool: pg.Pool,
  t: Tables,
  holdMs: number,
  graphOf: GraphOf,
  limit: number,
): Promise<{ timedOut: number; made: ReadyStepRun[] }> {
  const due = await pool.query<{
    workflow_run_id: string;
    step: string;
    waits_for: string;
    job: string;
    fingerprint: string;
  }>({ ...statements(t).timedOut, values: [limit] });
  const made: ReadyStepRun[] = [];
  let timedOut = 0;
  for (const wait of due.rows) {
    const graph = graphOf(wait.job, wait.fingerprint);
    const shape = graph?.steps.find((s) => s.name === wait.step);
    if (!graph || !shape?.signal) continue;
    const signal = shape.signal;
    const id = BigInt(wait.workflow_run_id);
    made.push(
      ...(await withTransaction(pool, async (client) => {
        const run = await lockWorkflowRun(client, t, holdMs, id);
        const still = await client.query({ ...statements(t).gateTimedOut, values: [id.toString(), wait.step] });
        if (!run || run.state !== 'running' || still.rowCount !== 1) return [];
        timedOut++;
        if (signal.onTimeout === 'fail') {
          const reason = `step "${wait.step}" waited ${signal.timeoutMs} ms for signal "${signal.name}", which did not come`;
          await failGate(client, t, id, wait.step, reason);
          await failWorkflowRun(client, t, id, reason);
          return [];
        }
        const marked = await client.query({
          ...statements(t).signal,
          values: [id.toString(), signal.name, JSON.stringify({ timedOut: true }), 'timeout'],
        });
        return marked.rowCount === 1 ? needDone(client, t, graph, run, wait.step) : [];
      })),
    );
  }
  return { timedOut, made };
}

/** The graph workflow run `id` was started with; a clear error when it has not started or this replica lacks it. */
async function pinnedGraph(
  client: pg.PoolClient,
  t: Tables,
  id: bigint,
  workflow: string,
  graphOf: GraphOf,
): Promise<WorkflowGraph> {
  const res = await client.query<{ kind: string; fingerprint: string | null }>({
    ...statements(t).pinnedTo,
    values: [id.toString()],
  });
  const row = res.rows[0];
  if (row?.kind !== 'workflow' || !row.fingerprint)
    throw new WorkflowRunError(id, `run ${id} is not a started workflow run`);
  const graph = graphOf(workflow, row.fingerprint);
  if (!graph)
    throw new WorkflowRunError(
      id,
      `workflow run ${id} was started with definition ${row.fingerprint} of "${workflow}", which this replica does not have (its code changed since): it can only go on where that definition runs`,
    );
  return graph;
}
