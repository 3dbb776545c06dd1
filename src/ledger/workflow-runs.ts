/**
 * A workflow run's life in the ledger, each change one transaction that locks the workflow run's
 * row first (workflow-steps.ts):
 * - start: the attempt that claimed the fired workflow run pins it to its definition (the
 *   fingerprint), makes a gate per step and the runs of the steps that need nothing;
 * - a step run completes: its result and completion commit with the user's writes (inside
 *   ctx.transaction) and with the steps that became ready;
 * - a step run fails for good: the workflow run fails, steps that had not started are cancelled.
 */
import type pg from 'pg';
import { InvalidArgumentError, StaleTokenError } from '../errors.js';
import type { Tables } from '../db/tables.js';
import { namedStatement, perSchema } from './named-statement.js';
import { storedError } from './stored-text.js';
import { ACTIVE_SQL } from './run-states.js';
import { UNKNOWN_WORKER, settleOldClaimRows, writeOwnEndedAttempts } from './attempt-rows.js';
import { withTransaction } from './transaction.js';
import type { TransactingAttempt } from './run-transactions.js';
import type { WorkflowGraph } from './workflow-graph.js';
import {
  failGate,
  itemCompleted,
  lockWorkflowRun,
  makeReady,
  MAX_RESULT_BYTES,
  type LockedWorkflowRun,
  type ReadyStepRun,
} from './workflow-steps.js';

/** A step run's place in its workflow run. */
export interface StepRunRef extends TransactingAttempt {
  workflowRunId: bigint;
  step: string;
}

/**
 * The CTEs that end step run $1's attempt $3 (claim $2) after CTE `run` moved it (RETURNING id,
 * claimed_by, claimed_at): its row as `outcome`; a 'running' row a version before 0020 wrote at the
 * claim is settled instead, 'stale' when refused (no `run` row; attempt-rows.ts).
 */
const endedStepAttempt = (t: Tables, outcome: string, error: string, stack: string) =>
  `attempt AS (
       ${writeOwnEndedAttempts(
         t,
         `SELECT run.id, $3::int, $2::bigint, COALESCE(run.claimed_by, '${UNKNOWN_WORKER}'), '${outcome}',
            COALESCE(run.claimed_at, now()), ${error}, ${stack} FROM run`,
       )}),
     settled AS (${settleOldClaimRows(
       t,
       `(SELECT $1::bigint AS run_id, $3::int AS attempt, '${outcome}'::text AS outcome, ${error} AS message, ${stack} AS stack)`,
     )})`;

const statements = perSchema((t) => ({
  /**
   * Pin workflow run $1 (claimed by token $2) to its definition $3 ({ definition: fingerprint,
   * steps: their names, needs, maps and waits }: what the console draws); its start attempt completed.
   */
  pin: namedStatement(
    'pin_workflow_run',
    `WITH claim AS (SELECT claimed_by, claimed_at FROM ${t.runs} WHERE id = $1),
     run AS (
       UPDATE ${t.runs} SET kind = 'workflow', claimed_by = NULL, result = $3::jsonb
       WHERE id = $1 AND claim_token = $2 AND state = 'running' AND kind = 'job'
       RETURNING id, attempts, claim_token)
     , attempt AS (
       ${writeOwnEndedAttempts(
         t,
         `SELECT run.id, run.attempts, run.claim_token, COALESCE(claim.claimed_by, '${UNKNOWN_WORKER}'), 'completed',
            COALESCE(claim.claimed_at, now()), NULL::text, NULL::text FROM run, claim`,
       )})
     SELECT count(*)::int AS pinned FROM run`,
  ),
  pinned: namedStatement(
    'workflow_run_pinned',
    `SELECT kind, result ->> 'definition' AS fingerprint, claim_token FROM ${t.runs} WHERE id = $1`,
  ),
  signalsOf: namedStatement('workflow_signals', `SELECT name FROM ${t.signals} WHERE workflow_run_id = $1`),
  /** Gates: arrays of steps, needs left, awaited signal, its timeout in ms. */
  gates: namedStatement(
    'insert_workflow_gates',
    `INSERT INTO ${t.workflowSteps} (workflow_run_id, step, state, needs_left, waits_for, timeout_at)
     SELECT $1, g.step, 'waiting', g.needs_left, g.waits_for,
       CASE WHEN g.timeout_ms IS NOT NULL THEN now() + g.timeout_ms * interval '1 millisecond' END
     FROM unnest($2::text[], $3::int[], $4::text[], $5::bigint[]) AS g(step, needs_left, waits_for, timeout_ms)
     ON CONFLICT (workflow_run_id, step) DO NOTHING
     RETURNING step, needs_left`,
  ),
  /** Complete step run $1 under claim $2 (attempt $3) with result $4. */
  completeStep: namedStatement(
    'complete_step_run',
    `WITH run AS (
       UPDATE ${t.runs} SET state = 'completed', finished_at = clock_timestamp(), completed_attempt = $3, result = $4::jsonb,
         error = NULL, available_at = NULL
       WHERE id = $1 AND claim_token = $2 AND state IN ${ACTIVE_SQL}
       RETURNING id, item, claimed_by, claimed_at)
     , ${endedStepAttempt(t, 'completed', 'NULL::text', 'NULL::text')}
     SELECT id FROM run`,
  ),
  /** Fail step run $1 under claim $2 (attempt $3) with message $4, stack $5. */
  failStep: namedStatement(
    'fail_step_run',
    `WITH run AS (
       UPDATE ${t.runs} SET state = 'failed', finished_at = now(), error = $4, failures = failures + 1
       WHERE id = $1 AND claim_token = $2 AND state IN ${ACTIVE_SQL}
       RETURNING id, claimed_by, claimed_at)
     , ${endedStepAttempt(t, 'failed', '$4::text', '$5::text')}
     SELECT id FROM run`,
  ),
  /** Workflow run $1 fails with reason $2; its step runs that wait are cancelled (fenced: a new token). */
  failRun: namedStatement(
    'fail_workflow_run',
    `WITH run AS (
       UPDATE ${t.runs} SET state = 'failed', finished_at = now(), error = $2 WHERE id = $1 AND state = 'running'
       RETURNING id),
     steps AS (
       UPDATE ${t.runs} SET state = 'cancelled', finished_at = now(), claim_token = nextval(${t.executionTokenSeq}),
         error = 'cancelled: ' || $2
       WHERE workflow_run_id = $1 AND state IN ('pending', 'retrying') AND EXISTS (SELECT 1 FROM run)
       RETURNING id)
     UPDATE ${t.workflowSteps} SET state = 'cancelled', reason = 'cancelled: ' || $2, completed_at = now()
     WHERE workflow_run_id = $1 AND state IN ('waiting', 'ready') AND EXISTS (SELECT 1 FROM run)
     RETURNING (SELECT count(*) FROM steps)::int AS steps`,
  ),
}));

/**
 * Start workflow run `claim` (its fired row, claimed by this attempt): pin it to `graph`, make a
 * gate per step, and the runs of the steps that need nothing. Refused (StaleTokenError) when a
 * newer attempt claimed it; a run already started by another attempt is left as it is.
 */
export async function startWorkflow(
  pool: pg.Pool,
  t: Tables,
  holdMs: number,
  claim: TransactingAttempt,
  graph: WorkflowGraph,
): Promise<ReadyStepRun[]> {
  return withTransaction(pool, async (client) => {
    const run = await lockWorkflowRun(client, t, holdMs, claim.runId);
    const s = statements(t);
    const pinned = await client.query<{ pinned: number }>({
      ...s.pin,
      values: [claim.runId.toString(), claim.token.toString(), JSON.stringify(definitionOf(graph))],
    });
    if (!run || pinned.rows[0]?.pinned !== 1) {
      const now = await client.query<{ kind: string; claim_token: string | null }>({
        ...s.pinned,
        values: [claim.runId.toString()],
      });
      const row = now.rows[0];
      if (row?.kind === 'workflow') return []; // started by an attempt before this one
      throw new StaleTokenError(
        `run ${claim.runId}`,
        claim.token,
        row?.claim_token == null ? null : BigInt(row.claim_token),
      );
    }
    const received = new Set(
      (await client.query<{ name: string }>({ ...s.signalsOf, values: [claim.runId.toString()] })).rows.map(
        (r) => r.name,
      ),
    );
    const waits = graph.steps.map((step) => (step.signal && !received.has(step.signal.name) ? step.signal : undefined));
    const gates = await client.query<{ step: string; needs_left: number }>({
      ...s.gates,
      values: [
        claim.runId.toString(),
        graph.steps.map((step) => step.name),
        graph.steps.map((step, i) => step.needs.length + (waits[i] ? 1 : 0)),
        waits.map((w) => w?.name ?? null),
        waits.map((w) => (w ? Math.floor(w.timeoutMs) : null)),
      ],
    });
    const made: ReadyStepRun[] = [];
    for (const gate of gates.rows.filter((g) => g.needs_left === 0).sort(byStep))
      made.push(...(await readyOrFail(client, t, graph, run, gate.step)));
    return made;
  });
}

/**
 * Step `step` became ready: make its runs, or, when its map cannot (not an array, too wide), fail
 * the workflow run with the reason instead.
 */
async function readyOrFail(
  client: pg.PoolClient,
  t: Tables,
  graph: WorkflowGraph,
  run: LockedWorkflowRun,
  step: string,
): Promise<ReadyStepRun[]> {
  await client.query('SAVEPOINT cw_ready');
  try {
    const made = await makeReady(client, t, graph, run, step);
    await client.query('RELEASE SAVEPOINT cw_ready');
    return made;
  } catch (err) {
    if (!(err instanceof InvalidArgumentError)) throw err;
    await client.query('ROLLBACK TO SAVEPOINT cw_ready');
    const reason = `step "${step}" could not be made: ${err.message}`;
    await failGate(client, t, run.id, step, reason);
    await failWorkflowRun(client, t, run.id, reason);
    return [];
  }
}

/**
 * Inside a transaction (ctx.transaction's, or one of its own): complete step run `ref` with its
 * result, and make the steps that became ready. Locks the workflow run first. Returns the runs
 * made, or null when the completion was refused (a newer attempt holds the step run, or it was
 * cancelled): the caller rolls the transaction back.
 */
export async function completeStepIn(
  client: pg.PoolClient,
  t: Tables,
  holdMs: number,
  graph: WorkflowGraph,
  ref: StepRunRef,
  result: unknown,
): Promise<ReadyStepRun[] | null> {
  const json = resultJson(ref, result);
  const run = await lockWorkflowRun(client, t, holdMs, ref.workflowRunId);
  return completeLocked(client, t, graph, run, ref, json);
}

/** completeStepIn with the workflow run locked (`run`, as read under the lock) and the result as JSON. */
async function completeLocked(
  client: pg.PoolClient,
  t: Tables,
  graph: WorkflowGraph,
  run: LockedWorkflowRun | null,
  ref: StepRunRef,
  json: string,
): Promise<ReadyStepRun[] | null> {
  const done = await client.query({
    ...statements(t).completeStep,
    values: [ref.runId.toString(), ref.token.toString(), ref.attempt, json],
  });
  if (done.rowCount !== 1) return null;
  // A failed or cancelled workflow run keeps the result (a retry reuses it) but makes nothing more.
  if (!run || run.state !== 'running') return [];
  const made: ReadyStepRun[] = [];
  await client.query('SAVEPOINT cw_progress');
  try {
    made.push(...(await itemCompleted(client, t, graph, run, ref.step)));
    await client.query('RELEASE SAVEPOINT cw_progress');
  } catch (err) {
    if (!(err instanceof InvalidArgumentError)) throw err;
    // A child's map failed: this step still completes; the workflow run fails with the reason.
    await client.query('ROLLBACK TO SAVEPOINT cw_progress');
    const reason = `a step after "${ref.step}" could not be made: ${err.message}`;
    await failWorkflowRun(client, t, run.id, reason);
    run.state = 'failed'; // as a later completion in the same transaction must see it
    return [];
  }
  return made;
}

/** Complete step run `ref` with `result` in a transaction of its own. */
export async function completeStep(
  pool: pg.Pool,
  t: Tables,
  holdMs: number,
  graph: WorkflowGraph,
  ref: StepRunRef,
  result: unknown,
): Promise<ReadyStepRun[] | null> {
  return withTransaction(pool, async (client, rollback) => {
    const made = await completeStepIn(client, t, holdMs, graph, ref, result);
    if (made === null) await rollback();
    return made;
  });
}

/** One step run's completion in a group: its workflow's graph, its place, what its step returned. */
export interface StepCompletion {
  graph: WorkflowGraph;
  ref: StepRunRef;
  result: unknown;
}

/** Each completion's answer: the runs made, null when refused, or the error it ended with. */
export type StepCompletionOutcome = { ok: true; made: ReadyStepRun[] | null } | { ok: false; error: unknown };

/**
 * Step runs of one workflow run completed together (the items of a fan-out finishing at once): the
 * workflow run locked once, each completion token-checked on its own (a refused one changes
 * nothing and the others go on), one COMMIT. Completed one by one they would queue on that lock,
 * each holding it through its own commit. Should the transaction fail, each is completed alone,
 * whose own transaction then finds what did commit.
 */
export async function completeStepsOfRun(
  pool: pg.Pool,
  t: Tables,
  holdMs: number,
  items: readonly StepCompletion[],
): Promise<StepCompletionOutcome[]> {
  const outcomes = new Array<StepCompletionOutcome | undefined>(items.length);
  const going: { i: number; json: string }[] = [];
  for (const [i, item] of items.entries()) {
    try {
      going.push({ i, json: resultJson(item.ref, item.result) });
    } catch (error) {
      outcomes[i] = { ok: false, error }; // a result that cannot be stored fails its own step only
    }
  }
  const workflowRunId = items[0]?.ref.workflowRunId;
  if (going.length > 0 && workflowRunId !== undefined) {
    if (items.some((it) => it.ref.workflowRunId !== workflowRunId))
      throw new InvalidArgumentError('a group of step completions must be of one workflow run');
    try {
      const made = await withTransaction(pool, async (client) => {
        const run = await lockWorkflowRun(client, t, holdMs, workflowRunId);
        const out: (ReadyStepRun[] | null)[] = [];
        for (const { i, json } of going)
          out.push(await completeLocked(client, t, items[i]!.graph, run, items[i]!.ref, json));
        return out;
      });
      for (const [k, { i }] of going.entries()) outcomes[i] = { ok: true, made: made[k]! };
    } catch {
      const alone = await Promise.allSettled(
        going.map(({ i }) => completeStep(pool, t, holdMs, items[i]!.graph, items[i]!.ref, items[i]!.result)),
      );
      for (const [k, { i }] of going.entries()) {
        const r = alone[k]!;
        outcomes[i] = r.status === 'fulfilled' ? { ok: true, made: r.value } : { ok: false, error: r.reason };
      }
    }
  }
  return outcomes.map((o) => o!);
}

/**
 * Step run `ref` failed for good (its retries used up): record it, and fail its workflow run;
 * its steps that had not started are cancelled. False when a newer attempt holds the step run.
 */
export async function failStep(
  pool: pg.Pool,
  t: Tables,
  holdMs: number,
  ref: StepRunRef,
  error: unknown,
): Promise<boolean> {
  const stored = storedError(error);
  return withTransaction(pool, async (client, rollback) => {
    await lockWorkflowRun(client, t, holdMs, ref.workflowRunId);
    const done = await client.query({
      ...statements(t).failStep,
      values: [ref.runId.toString(), ref.token.toString(), ref.attempt, stored.message, stored.stack],
    });
    if (done.rowCount !== 1) {
      await rollback();
      return false;
    }
    const reason = `step "${ref.step}" failed: ${stored.message}`;
    await failGate(client, t, ref.workflowRunId, ref.step, reason);
    await failWorkflowRun(client, t, ref.workflowRunId, reason);
    return true;
  });
}

/** Fail workflow run `id` (locked by the caller) with `reason`; its waiting step runs are cancelled. */
export async function failWorkflowRun(client: pg.PoolClient, t: Tables, id: bigint, reason: string): Promise<void> {
  await client.query({ ...statements(t).failRun, values: [id.toString(), storedError(reason).message] });
}

/** A step's result as JSON text, bounded; a clear error when it is not JSON or too large. */
function resultJson(ref: StepRunRef, result: unknown): string {
  let json: string | undefined;
  try {
    json = JSON.stringify(result ?? null);
  } catch (err) {
    throw new InvalidArgumentError(`step "${ref.step}" returned a result that is not JSON: ${(err as Error).message}`);
  }
  if (json === undefined) json = 'null';
  if (Buffer.byteLength(json) > MAX_RESULT_BYTES)
    throw new InvalidArgumentError(
      `step "${ref.step}" returned a result of ${Buffer.byteLength(json)} bytes; at most ${MAX_RESULT_BYTES} are stored`,
    );
  return json;
}

function byStep(a: { step: string }, b: { step: string }): number {
  return a.step < b.step ? -1 : a.step > b.step ? 1 : 0;
}

/** What a workflow run keeps of its definition: its fingerprint and its graph's shape. */
export function definitionOf(graph: WorkflowGraph): { definition: string; steps: unknown[] } {
  return {
    definition: graph.fingerprint,
    steps: graph.steps.map((s) => ({
      name: s.name,
      needs: s.needs,
      mapped: s.mapped,
      ...(s.afterMs > 0 ? { afterMs: s.afterMs } : {}),
      ...(s.signal ? { signal: s.signal } : {}),
    })),
  };
}
