/**
 * Workflow runs in the ledger (workflow-runs.ts, workflow-control.ts, workflow-steps.ts), bound to
 * a pool and the deployment's tables.
 */
import type pg from 'pg';
import type { Tables } from '../db/tables.js';
import { namedStatement, perSchema } from './named-statement.js';
import { StaleTokenError } from '../errors.js';
import { checkStatement, recordSkippedAttempt, type TransactingAttempt } from './run-transactions.js';
import { KeyedTurns } from './keyed-turns.js';
import { HeldTransaction } from './transaction.js';
import { DEFAULT_LEASE_TTL_MS } from './commit-stamps.js';
import type { WorkflowGraph } from './workflow-graph.js';
import {
  cancelWorkflow,
  failUndefinedWorkflows,
  retryWorkflow,
  signalWorkflow,
  timeOutWaits,
  type GraphOf,
} from './workflow-control.js';
import {
  completeStep,
  completeStepIn,
  completeStepsOfRun,
  failStep,
  startWorkflow,
  type StepCompletion,
  type StepCompletionOutcome,
  type StepRunRef,
} from './workflow-runs.js';
import { stepInput, type ReadyStepRun } from './workflow-steps.js';

export type { GraphOf } from './workflow-control.js';
export type { StepCompletion, StepCompletionOutcome, StepRunRef } from './workflow-runs.js';
export type { ReadyStepRun } from './workflow-steps.js';

/** The answer to a signal sent to a workflow run. */
export interface SentSignal {
  /** False when the run already had a signal of that name (the first one counts). */
  accepted: boolean;
  /** Step runs the signal made ready. */
  started: number;
}

/** What a run is, for the operations that differ by kind (retry, cancel). */
export interface RunPlace {
  kind: 'job' | 'workflow' | 'step';
  job: string;
  scheduledAt: Date;
  state: string;
  /** A step run's workflow run. */
  workflowRunId?: bigint;
}

/** What a step that waited for a signal received. */
export interface StoredSignal {
  name: string;
  payload: unknown;
  sentBy: string;
  sentAt: Date;
}

const statements = perSchema((t) => ({
  place: namedStatement(
    'run_place',
    `SELECT kind, workflow_run_id, job, scheduled_at, state FROM ${t.runs} WHERE id = $1`,
  ),
  signal: namedStatement(
    'workflow_signal',
    `SELECT name, payload, sent_by, sent_at FROM ${t.signals} WHERE workflow_run_id = $1 AND name = $2`,
  ),
}));

export class WorkflowLedger {
  /**
   * How long a transaction holding a workflow run's lock may sit idle (lockWorkflowRun): a replica
   * frozen mid-progress would otherwise hold up every other step completion of that run, and the
   * pool connections they wait on, until it thawed. Ledger.useLeaseTtl sets the replica's TTL.
   */
  lockHoldMs = DEFAULT_LEASE_TTL_MS;
  /**
   * One transaction at a time from this replica on a workflow run's lock. Two of its sessions
   * queued on one run's lock would hold it two TTLs if the replica froze (the second is granted
   * when PostgreSQL ends the first, and then sits idle a TTL of its own; the drill saw the other
   * replicas' completions of the run wait the whole 4 s freeze): taking turns here first, a frozen
   * replica holds it one TTL at most.
   */
  private readonly turns = new KeyedTurns();

  constructor(
    private readonly pool: pg.Pool,
    private readonly t: Tables,
  ) {}

  /** What run `id` is (a job's run, a workflow run, a step run of one), or undefined when there is none. */
  async place(id: bigint): Promise<RunPlace | undefined> {
    const res = await this.pool.query<{
      kind: RunPlace['kind'];
      workflow_run_id: string | null;
      job: string;
      scheduled_at: Date;
      state: string;
    }>({ ...statements(this.t).place, values: [id.toString()] });
    const r = res.rows[0];
    if (!r) return undefined;
    return {
      kind: r.kind,
      job: r.job,
      scheduledAt: r.scheduled_at,
      state: r.state,
      ...(r.workflow_run_id === null ? {} : { workflowRunId: BigInt(r.workflow_run_id) }),
    };
  }

  /** Start a claimed workflow run (workflow-runs.ts); the step runs made, to hand to the queue. */
  start(claim: TransactingAttempt, graph: WorkflowGraph): Promise<ReadyStepRun[]> {
    return this.inTurn(claim.runId, () => startWorkflow(this.pool, this.t, this.lockHoldMs, claim, graph));
  }

  /** The input of a step run: its needs' results. */
  input(graph: WorkflowGraph, workflowRunId: bigint, step: string): Promise<Record<string, unknown>> {
    return stepInput(this.pool, this.t, graph, workflowRunId, step);
  }

  /** The signal `name` workflow run `id` received, if any. */
  async received(id: bigint, name: string): Promise<StoredSignal | undefined> {
    const res = await this.pool.query<{ name: string; payload: unknown; sent_by: string; sent_at: Date }>({
      ...statements(this.t).signal,
      values: [id.toString(), name],
    });
    const r = res.rows[0];
    return r ? { name: r.name, payload: r.payload, sentBy: r.sent_by, sentAt: r.sent_at } : undefined;
  }

  /** Complete a step run with its result (no ctx.transaction); null: refused (a newer attempt holds it). */
  complete(graph: WorkflowGraph, ref: StepRunRef, result: unknown): Promise<ReadyStepRun[] | null> {
    return this.inTurn(ref.workflowRunId, () => completeStep(this.pool, this.t, this.lockHoldMs, graph, ref, result));
  }

  /** Several step runs of one workflow run completed in one transaction (see completeStepsOfRun). */
  completeMany(items: readonly StepCompletion[]): Promise<StepCompletionOutcome[]> {
    const run = items[0]?.ref.workflowRunId;
    const all = () => completeStepsOfRun(this.pool, this.t, this.lockHoldMs, items);
    return run === undefined ? all() : this.inTurn(run, all);
  }

  /**
   * ctx.transaction of a step, opened: BEGIN with the check (an earlier attempt completed the step:
   * 'skipped', recorded; a newer claim: StaleTokenError). The transaction stays open: the step's
   * writes commit with its result when it returns (commitHeld), or not at all (rollback).
   */
  async open(ref: StepRunRef): Promise<{ status: 'open'; tx: HeldTransaction } | { status: 'skipped' }> {
    const { tx, opened } = await HeldTransaction.begin(this.pool, checkStatement(this.t, [ref]));
    const row = opened?.rows[0] as { state: string; claim_token: string | null } | undefined;
    if (!row || row.state === 'completed') {
      await tx.rollback();
      await recordSkippedAttempt(this.pool, this.t, ref, 'run already completed by an earlier attempt');
      return { status: 'skipped' };
    }
    const newest = row.claim_token === null ? null : BigInt(row.claim_token);
    if (newest !== ref.token) {
      await tx.rollback();
      throw new StaleTokenError(`run ${ref.runId}`, ref.token, newest);
    }
    return { status: 'open', tx };
  }

  /**
   * Complete a step in its held transaction with its result, make the steps that became ready,
   * and commit; null (rolled back) when refused: a newer attempt holds the step run.
   */
  async commitHeld(
    tx: HeldTransaction,
    graph: WorkflowGraph,
    ref: StepRunRef,
    result: unknown,
  ): Promise<ReadyStepRun[] | null> {
    return this.inTurn(ref.workflowRunId, async () => {
      try {
        const made = await completeStepIn(tx.client, this.t, this.lockHoldMs, graph, ref, result);
        if (made === null) {
          await tx.rollback();
          return null;
        }
        await tx.commit();
        return made;
      } finally {
        if (tx.isOpen) await tx.rollback().catch(() => undefined);
      }
    });
  }

  /** A step run failed for good: its workflow run fails (workflow-runs.ts). */
  fail(ref: StepRunRef, error: unknown): Promise<boolean> {
    return this.inTurn(ref.workflowRunId, () => failStep(this.pool, this.t, this.lockHoldMs, ref, error));
  }

  cancel(id: bigint, reason: string): Promise<{ cancelled: boolean; steps: bigint[] }> {
    return this.inTurn(id, () => cancelWorkflow(this.pool, this.t, this.lockHoldMs, id, reason));
  }

  retry(id: bigint, graphOf: GraphOf): Promise<ReadyStepRun[]> {
    return this.inTurn(id, () => retryWorkflow(this.pool, this.t, this.lockHoldMs, id, graphOf));
  }

  signal(
    id: bigint,
    o: { name: string; payload: unknown; by: string },
    graphOf: GraphOf,
  ): Promise<{ accepted: boolean; made: ReadyStepRun[] }> {
    return this.inTurn(id, () => signalWorkflow(this.pool, this.t, this.lockHoldMs, id, o, graphOf));
  }

  /** Fail running workflow runs whose definition no live replica has (`defined`: what they define). */
  failUndefined(
    defined: readonly string[],
    graceMs: number,
  ): Promise<{ runId: bigint; definition: string; steps: bigint[] }[]> {
    return failUndefinedWorkflows(this.pool, this.t, this.lockHoldMs, defined, graceMs);
  }

  timeOutWaits(graphOf: GraphOf, limit: number): Promise<{ timedOut: number; made: ReadyStepRun[] }> {
    return timeOutWaits(this.pool, this.t, this.lockHoldMs, graphOf, limit);
  }

  /** `fn`, which takes workflow run `id`'s lock, once this replica's earlier calls on that run are done. */
  private inTurn<T>(id: bigint, fn: () => Promise<T>): Promise<T> {
    return this.turns.run(id.toString(), fn);
  }
}
