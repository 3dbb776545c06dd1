/**
 * A workflow run's progress, inside a transaction that holds the workflow run's row lock (taken
 * first, always: every progress, failure, cancel, retry and signal of a workflow run goes through
 * that one row, so they never interleave and never deadlock; gates are then locked in step-name
 * order). A step becomes ready when its gate's `needs_left` reaches 0: its runs (one per item when
 * mapped) are inserted under the unique (workflow_run_id, step, item) key, in the same transaction
 * as the completion that made it ready, so a step with several needs is made once (I7, exactly once).
 */
import type pg from 'pg';
import type { Tables } from '../db/tables.js';
import { namedStatement, perSchema } from './named-statement.js';
import { idleLimitMs } from './transaction.js';
import { stepJobName, stepOf, type WorkflowGraph } from './workflow-graph.js';

/** A step run made ready, to be handed to the queue once its transaction commits. */
export interface ReadyStepRun {
  runId: bigint;
  job: string;
  scheduledAt: Date;
  /** Not before this (a step's delay); null: now. */
  availableAt: Date | null;
  /** Claims it had before (a step run made again by a retry): its next delivery needs a job id of its own. */
  attempts: number;
}

/** The workflow run row, as progress needs it (locked). */
export interface LockedWorkflowRun {
  id: bigint;
  job: string;
  scheduledAt: Date;
  state: string;
  leaderToken: string;
  leaderId: string;
}

/** The greatest result a step may store, as JSON text. */
export const MAX_RESULT_BYTES = 1_000_000;

const statements = perSchema((t) => ({
  /**
   * Lock workflow run $1, and from here to the end of the transaction let PostgreSQL end the session
   * should it sit idle for $2 ms (set in the same round trip; only cronwarden's own statements
   * follow the lock, so idling that long means the replica froze: fenceHoldLimit's rule).
   */
  lockRun: namedStatement(
    'lock_workflow_run',
    `SELECT id, job, scheduled_at, state, leader_token, leader_id, kind,
            set_config('idle_in_transaction_session_timeout', $2, true) AS hold_limit
     FROM ${t.runs} WHERE id = $1 FOR UPDATE`,
  ),
  /** The results of the steps $2 of workflow run $1, completed, in step and item order. */
  results: namedStatement(
    'workflow_step_results',
    `SELECT step, item, result FROM ${t.runs}
     WHERE workflow_run_id = $1 AND step = ANY($2::text[]) AND state IN ('completed', 'superseded')
     ORDER BY step, COALESCE(item, -1)`,
  ),
  /**
   * Insert step $6's runs, released to the queue with a cw_hand_overs row each (as a fire commit
   * releases its runs, fire-commit.ts): the completing worker hands them over once its transaction
   * commits, and confirming that deletes the narrow rows instead of rewriting the runs' rows.
   */
  insertRuns: namedStatement(
    'insert_step_runs',
    `WITH made AS (
       INSERT INTO ${t.runs} (job, scheduled_at, trigger, leader_token, leader_id, state, kind, workflow_run_id, step,
         item, payload, created_at, available_at, enqueued_at)
       SELECT $1, $2, 'step', $3, $4, 'pending', 'step', $5, $6, i.item, i.payload, clock_timestamp(),
         CASE WHEN $8::bigint > 0 THEN now() + $8::bigint * interval '1 millisecond' END, now()
       FROM unnest($7::int[], $9::jsonb[]) AS i(item, payload)
       ON CONFLICT (workflow_run_id, step, COALESCE(item, -1)) WHERE workflow_run_id IS NOT NULL DO NOTHING
       RETURNING id, available_at),
     released AS (INSERT INTO ${t.handOvers} (run_id) SELECT id FROM made)
     SELECT id, available_at FROM made`,
  ),
  ready: namedStatement(
    'workflow_step_ready',
    `UPDATE ${t.workflowSteps} SET state = $4, items_total = $3, items_left = $3, ready_at = now(),
       completed_at = CASE WHEN $4 = 'completed' THEN now() END
     WHERE workflow_run_id = $1 AND step = $2`,
  ),
  /** One item of step $2 of run $1 completed; its items left. */
  itemDone: namedStatement(
    'workflow_item_done',
    `UPDATE ${t.workflowSteps} SET items_left = items_left - 1,
       state = CASE WHEN items_left - 1 = 0 THEN 'completed' ELSE state END,
       completed_at = CASE WHEN items_left - 1 = 0 THEN now() END
     WHERE workflow_run_id = $1 AND step = $2 AND state = 'ready' RETURNING items_left`,
  ),
  /** One need (or the awaited signal) of step $2 of run $1 is done; its needs left. */
  needDone: namedStatement(
    'workflow_need_done',
    `UPDATE ${t.workflowSteps} SET needs_left = needs_left - 1
     WHERE workflow_run_id = $1 AND step = $2 AND state = 'waiting' RETURNING needs_left`,
  ),
  openGates: namedStatement(
    'workflow_open_gates',
    `SELECT count(*)::int AS n FROM ${t.workflowSteps} WHERE workflow_run_id = $1 AND state <> 'completed'`,
  ),
  complete: namedStatement(
    'complete_workflow_run',
    `UPDATE ${t.runs} SET state = 'completed', finished_at = now(), completed_attempt = attempts, error = NULL
     WHERE id = $1 AND state = 'running'`,
  ),
  failGate: namedStatement(
    'fail_workflow_gate',
    `UPDATE ${t.workflowSteps} SET state = 'failed', reason = $3, completed_at = now()
     WHERE workflow_run_id = $1 AND step = $2 AND state <> 'completed'`,
  ),
}));

/**
 * Lock workflow run `id` (the first lock of every change to its progress); null when it is gone.
 * The transaction may then sit idle at most `holdMs` (WorkflowLedger.lockHoldMs) before PostgreSQL
 * ends it: a frozen replica must not keep the run's other completions waiting until it thaws.
 */
export async function lockWorkflowRun(
  client: pg.PoolClient,
  t: Tables,
  holdMs: number,
  id: bigint,
): Promise<LockedWorkflowRun | null> {
  const res = await client.query<{
    id: string;
    job: string;
    scheduled_at: Date;
    state: string;
    leader_token: string;
    leader_id: string;
  }>({ ...statements(t).lockRun, values: [id.toString(), String(idleLimitMs(holdMs))] });
  const r = res.rows[0];
  return r
    ? {
        id: BigInt(r.id),
        job: r.job,
        scheduledAt: r.scheduled_at,
        state: r.state,
        leaderToken: r.leader_token,
        leaderId: r.leader_id,
      }
    : null;
}

/** The input of `step`: each need's result (a mapped need's as an array in item order). */
export async function stepInput(
  db: Pick<pg.Pool, 'query'> | pg.PoolClient,
  t: Tables,
  graph: WorkflowGraph,
  workflowRunId: bigint,
  step: string,
): Promise<Record<string, unknown>> {
  const needs = stepOf(graph, step).needs;
  const input: Record<string, unknown> = {};
  if (needs.length === 0) return input;
  const res = await db.query<{ step: string; item: number | null; result: unknown }>({
    ...statements(t).results,
    values: [workflowRunId.toString(), [...needs]],
  });
  for (const need of needs) {
    const rows = res.rows.filter((r) => r.step === need);
    input[need] = stepOf(graph, need).mapped ? rows.map((r) => r.result) : (rows[0]?.result ?? null);
  }
  return input;
}

/**
 * Step `step` of `run` is ready: make its runs (one per item when mapped; none for an empty map,
 * which completes the step at once). Returns the runs made, and the steps completed on the way
 * (an empty map's, and whatever that completes in turn).
 */
export async function makeReady(
  client: pg.PoolClient,
  t: Tables,
  graph: WorkflowGraph,
  run: LockedWorkflowRun,
  step: string,
): Promise<ReadyStepRun[]> {
  const shape = stepOf(graph, step);
  let items: readonly unknown[] | undefined;
  if (shape.mapped) {
    const input = await stepInput(client, t, graph, run.id, step);
    items = graph.items(step, input); // throws on a bad map: the caller fails the workflow run
  }
  const s = statements(t);
  if (items && items.length === 0) {
    await client.query({ ...s.ready, values: [run.id.toString(), step, 0, 'completed'] });
    return stepCompleted(client, t, graph, run, step);
  }
  const rows = items ? items.map((_, i) => i) : [null];
  const payloads = items ? items.map((v) => JSON.stringify(v ?? null)) : [null];
  const job = stepJobName(graph.workflow, graph.fingerprint, step);
  const res = await client.query<{ id: string; available_at: Date | null }>({
    ...s.insertRuns,
    values: [
      job,
      run.scheduledAt,
      run.leaderToken,
      run.leaderId,
      run.id.toString(),
      step,
      rows,
      Math.max(0, Math.floor(shape.afterMs)),
      payloads,
    ],
  });
  await client.query({ ...s.ready, values: [run.id.toString(), step, rows.length, 'ready'] });
  return res.rows.map((r) => ({
    runId: BigInt(r.id),
    job,
    scheduledAt: run.scheduledAt,
    availableAt: r.available_at,
    attempts: 0,
  }));
}

/**
 * One run (item) of `step` completed: count it on the step's gate; the last one completes the step,
 * which counts as a done need on each child's gate (in name order); a child with none left is made
 * ready. When no gate is left open, the workflow run completes. Returns the step runs made.
 */
export async function itemCompleted(
  client: pg.PoolClient,
  t: Tables,
  graph: WorkflowGraph,
  run: LockedWorkflowRun,
  step: string,
): Promise<ReadyStepRun[]> {
  const res = await client.query<{ items_left: number }>({
    ...statements(t).itemDone,
    values: [run.id.toString(), step],
  });
  const left = res.rows[0]?.items_left;
  if (left !== 0) return [];
  return stepCompleted(client, t, graph, run, step);
}

/** Every item of `step` completed: its children's gates, then the workflow run's completion. */
async function stepCompleted(
  client: pg.PoolClient,
  t: Tables,
  graph: WorkflowGraph,
  run: LockedWorkflowRun,
  step: string,
): Promise<ReadyStepRun[]> {
  const made: ReadyStepRun[] = [];
  for (const child of stepOf(graph, step).children) made.push(...(await needDone(client, t, graph, run, child)));
  const open = await client.query<{ n: number }>({ ...statements(t).openGates, values: [run.id.toString()] });
  if (open.rows[0]?.n === 0) await client.query({ ...statements(t).complete, values: [run.id.toString()] });
  return made;
}

/** A need of `step` (or the signal it waits for) is done; make it ready when none is left. */
export async function needDone(
  client: pg.PoolClient,
  t: Tables,
  graph: WorkflowGraph,
  run: LockedWorkflowRun,
  step: string,
): Promise<ReadyStepRun[]> {
  const res = await client.query<{ needs_left: number }>({
    ...statements(t).needDone,
    values: [run.id.toString(), step],
  });
  return res.rows[0]?.needs_left === 0 ? makeReady(client, t, graph, run, step) : [];
}

/** Mark step `step`'s gate failed with `reason` (the workflow run fails with it; see workflow-runs.ts). */
export async function failGate(client: pg.PoolClient, t: Tables, runId: bigint, step: string, reason: string) {
  await client.query({ ...statements(t).failGate, values: [runId.toString(), step, reason] });
}
