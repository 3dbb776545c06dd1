/**
 * What an operator does to workflow runs, on any replica: resume a failed or cancelled one from its
 * failed steps, cancel one (its running steps are told to stop; their late writes are refused by
 * the new tokens), send one a signal. Each is one transaction in the ledger; the step runs it makes
 * ready are handed to the queue here.
 */
import type { Logger } from 'pino';
import { RunNotFoundError } from '../errors.js';
import type { BullmqDelivery } from '../jobs/bullmq-delivery.js';
import type { JobRegistry } from '../jobs/job-registry.js';
import type { Ledger } from '../ledger/ledger.js';
import type { RetriedRun } from '../ledger/run-retry.js';
import type { GraphOf, ReadyStepRun, SentSignal } from '../ledger/workflow-ledger.js';

export class WorkflowOps {
  private readonly graphOf: GraphOf;

  constructor(private readonly o: { ledger: Ledger; registry: JobRegistry; delivery: BullmqDelivery; logger: Logger }) {
    this.graphOf = (workflow, fingerprint) => o.registry.workflowGraph(workflow, fingerprint);
  }

  /** The workflow run a run id names: itself, or the workflow run of a step run; undefined for a job's run. */
  async workflowRunOf(runId: bigint): Promise<bigint | undefined> {
    const place = await this.o.ledger.workflows.place(runId);
    if (!place) throw new RunNotFoundError(runId);
    if (place.kind === 'step') return place.workflowRunId;
    return place.kind === 'workflow' ? runId : undefined;
  }

  /** Resume a failed or cancelled workflow run from its failed steps (see workflow-control.ts). */
  async retry(id: bigint): Promise<RetriedRun> {
    const before = (await this.o.ledger.workflows.place(id))!;
    const made = await this.o.ledger.workflows.retry(id, this.graphOf);
    await this.hand(made);
    this.o.logger.info({ runId: id.toString(), steps: made.length }, 'workflow run resumed from its failed steps');
    return { runId: id, job: before.job, scheduledAt: before.scheduledAt, previousState: before.state };
  }

  /** Cancel run `id` (a workflow run with its active steps, or a job's run); false when it was not active. */
  async cancel(id: bigint, reason: string): Promise<boolean> {
    const { cancelled, steps } = await this.o.ledger.workflows.cancel(id, reason);
    // Running attempts stop at once; their commits are refused in any case (cancelled, new tokens).
    if (cancelled) await this.o.delivery.cancel([id, ...steps]);
    return cancelled;
  }

  async signal(id: bigint, name: string, payload: unknown, by: string): Promise<SentSignal> {
    const { accepted, made } = await this.o.ledger.workflows.signal(id, { name, payload, by }, this.graphOf);
    await this.hand(made);
    return { accepted, started: made.length };
  }

  /** Waits past their timeout: fail their runs, or go on (a leader's chore). */
  async timeOutWaits(): Promise<number> {
    const { timedOut, made } = await this.o.ledger.workflows.timeOutWaits(this.graphOf, 200);
    await this.hand(made);
    return timedOut;
  }

  private async hand(made: readonly ReadyStepRun[]): Promise<void> {
    await this.o.delivery
      .handOver(made, (ids) => this.o.ledger.fires.markEnqueued(ids))
      .catch((err: Error) => this.o.logger.warn({ err }, 'could not hand step runs to the queue; the outbox will'));
  }
}
