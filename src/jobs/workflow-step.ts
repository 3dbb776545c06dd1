/**
 * How a claimed run becomes work: a job's run calls its handler; a workflow step's run calls the
 * step's `run` with its input (its needs' results, a mapped step's item) and commits its result
 * with its completion and the steps made ready; a workflow run's own claim only starts it.
 * RunExecutor claims, settles and records; this file is what differs by kind.
 */
import type { Logger } from 'pino';
import type { JobDefinition } from './define-job.js';
import type { StepContext } from './define-workflow.js';
import type { JobContext } from './job-context.js';
import type { RegisteredStep } from './job-registry.js';
import type { AttemptLedger } from './attempt.js';
import type { Claim, Outcome, FinishDetails, TransactionResult } from '../ledger/run-ledger.js';
import type { ReadyStepRun, StepRunRef, WorkflowLedger } from '../ledger/workflow-ledger.js';
import type { HeldTransaction } from '../ledger/transaction.js';
import { ledgerCall } from './ledger-call.js';
import { StepAlreadyCompletedError } from '../errors.js';

/** The workflow ledger operations a worker uses. */
export type WorkerWorkflowLedger = Pick<
  WorkflowLedger,
  'start' | 'input' | 'received' | 'complete' | 'open' | 'commitHeld' | 'fail'
>;

/** The run ledger operations a Runnable records with. */
type RecordingLedger = AttemptLedger & {
  finish(claim: Claim, outcome: Outcome, error?: unknown, details?: FinishDetails): Promise<boolean>;
};

/** What the executor runs for one claim, and how its outcome is recorded. */
export interface Runnable {
  /** Its handler, retries, backoff and timeout. */
  readonly job: JobDefinition;
  /** What ctx.fence and ctx.transaction go through. */
  readonly ledger: AttemptLedger;
  /** Record the handler's return (no ctx.transaction): true when accepted. */
  complete(value: unknown): Promise<boolean>;
  /** Record the last failure (no retry left): true when accepted. */
  fail(error: unknown): Promise<boolean>;
  /** The step runs this attempt made ready (to hand to the queue once recorded). */
  readonly made: ReadyStepRun[];
  /**
   * A step's ctx.transaction is held open until the step returns: commit it with the step's
   * result (true; false when refused: a newer attempt holds the run), or roll it back (the step
   * threw or was abandoned: nothing of it committed). Undefined when nothing is held.
   */
  held?(): { commit(result: unknown): Promise<boolean>; rollback(): Promise<void> } | undefined;
}

/** A job's run: its handler; outcomes through the run ledger. */
export function jobRunnable(job: JobDefinition, claim: Claim, ledger: RecordingLedger): Runnable {
  return {
    job,
    ledger,
    complete: () => ledger.finish(claim, 'completed'),
    fail: (error) => ledger.finish(claim, 'failed', error, { failure: true }),
    made: [],
  };
}

/**
 * A workflow step's run: its input read, its `run` called with it, its result (the value `run`
 * returns, or inside ctx.transaction the value the callback returns) committed with the step's
 * completion and the steps made ready.
 */
export async function stepRunnable(
  reg: RegisteredStep,
  claim: Claim,
  ledgers: { runs: AttemptLedger; workflows: WorkerWorkflowLedger },
): Promise<Runnable> {
  const { workflow, spec } = reg;
  const graph = workflow.graph;
  const place = claim.workflow!;
  const ref: StepRunRef = {
    runId: claim.runId,
    token: claim.token,
    attempt: claim.attempt,
    workflowRunId: place.runId,
    step: place.step,
  };
  const input = await ledgerCall(`input of step run ${claim.runId}`, () =>
    ledgers.workflows.input(graph, place.runId, place.step),
  );
  const stored = spec.signal
    ? await ledgerCall(`signal of step run ${claim.runId}`, () =>
        ledgers.workflows.received(place.runId, spec.signal!.name),
      )
    : undefined;
  const timedOut = stored?.sentBy === 'timeout';
  const received: StepContext['received'] = !spec.signal
    ? undefined
    : timedOut || !stored
      ? { name: spec.signal.name, data: undefined, timedOut: true }
      : { name: stored.name, data: stored.payload, timedOut: false };
  const made: ReadyStepRun[] = [];
  let skipped = false;
  let held: HeldTransaction | undefined;
  const job: JobDefinition = {
    ...spec.job,
    handler: (ctx: JobContext) => {
      // Not a spread: it would read ctx.signal, made on first read.
      const stepCtx: StepContext = Object.assign(copyOf(ctx), {
        transaction: async <T>(fn: (tx: import('pg').PoolClient) => Promise<T>): Promise<T> => {
          const value = await ctx.transaction(fn);
          if (skipped)
            throw new StepAlreadyCompletedError(`step run ${claim.runId} was completed by an earlier attempt`);
          return value as T;
        },
        workflowRunId: place.runId.toString(),
        step: place.step,
        item: place.item ?? undefined,
        received,
      });
      return spec.map ? spec.run(stepCtx, claim.payload, input) : spec.run(stepCtx, input, input);
    },
  };
  // A step's ctx.transaction: fn runs in a transaction held open until the step returns, whose
  // result then commits with fn's writes and the step's completion (RunExecutor: held()).
  const ledger: AttemptLedger = {
    fenceRun: (resource, c, tx) => ledgers.runs.fenceRun(resource, c, tx),
    completeInTransaction: async <T>(_claim: Claim, fn: (tx: import('pg').PoolClient) => Promise<T>) => {
      const opened = await ledgers.workflows.open(ref);
      if (opened.status === 'skipped') {
        skipped = true;
        return { status: 'skipped' };
      }
      try {
        const value = await fn(opened.tx.client);
        held = opened.tx;
        return { status: 'committed', value } as TransactionResult<T>;
      } catch (err) {
        await opened.tx.rollback().catch(() => undefined);
        throw err;
      }
    },
  };
  return {
    job,
    ledger,
    made,
    async complete(value) {
      const done = await ledgers.workflows.complete(graph, ref, value);
      if (done === null) return false;
      made.push(...done);
      return true;
    },
    fail: (error) => ledgers.workflows.fail(ref, error),
    held: () =>
      held?.isOpen
        ? {
            async commit(result) {
              const done = await ledgers.workflows.commitHeld(held!, graph, ref, result);
              if (done === null) return false;
              made.push(...done);
              return true;
            },
            rollback: () => held!.rollback(),
          }
        : undefined,
  };
}

/** A workflow run's claim: start it (pin its definition, make its first steps); the step runs made. */
export async function startWorkflowRun(
  workflows: WorkerWorkflowLedger,
  claim: Claim,
  graph: RegisteredStep['workflow']['graph'],
  log: Logger,
): Promise<ReadyStepRun[]> {
  const made = await workflows.start(claim, graph);
  log.info({ steps: made.length, definition: graph.fingerprint }, 'workflow run started');
  return made;
}

/** A copy of `ctx` with its getters kept as getters (ctx.signal is made on first read). */
function copyOf(ctx: JobContext): JobContext {
  return Object.defineProperties({}, Object.getOwnPropertyDescriptors(ctx)) as JobContext;
}
