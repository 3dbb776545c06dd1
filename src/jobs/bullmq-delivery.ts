import { Queue } from 'bullmq';
import type { Redis } from 'ioredis';
import type { JobRegistry } from './job-registry.js';
import { handlerOf } from '../scheduler/schedules/runtime-schedules.js';
import type { DeliverableRun, QueuedState, RunDelivery } from '../scheduler/firing/run-delivery.js';
import { bullmqJobId, controlChannel, queueName } from './bullmq-names.js';
import type { ControlMessage } from './run-executor.js';

export interface RunJobData {
  runId: string;
  job: string;
  scheduledAt: string;
  /** The committing fire's trace context, so the attempt's span continues its trace. */
  traceparent?: string;
}

/** Hands committed runs to BullMQ. Retries and backoff come from the job definition. */
export class BullmqDelivery implements RunDelivery {
  readonly queue: Queue<RunJobData>;

  constructor(
    private readonly o: {
      connection: Redis;
      namespace: string;
      registry: JobRegistry;
      /** The ledger the runs come from (its identity goes into every job id). */
      ledger: { identity(): Promise<string> };
      keepCompletedSeconds?: number;
      /** The source of delivery jitter (a job's jitterMs); injectable so tests can fix it. Default Math.random. */
      random?: () => number;
    },
  ) {
    this.queue = new Queue<RunJobData>(queueName(o.namespace), { connection: o.connection });
  }

  async enqueue(runs: DeliverableRun[]): Promise<void> {
    if (runs.length === 0) return;
    const ledgerId = await this.o.ledger.identity();
    await this.queue.addBulk(
      runs.map((run) => {
        const job = this.o.registry.get(handlerOf(run.job));
        return {
          name: run.job,
          data: {
            runId: run.runId.toString(),
            job: run.job,
            scheduledAt: run.scheduledAt.toISOString(),
            ...(run.traceparent ? { traceparent: run.traceparent } : {}),
          },
          opts: {
            jobId: bullmqJobId(ledgerId, run.runId),
            attempts: (job?.retries ?? 0) + 1,
            backoff: job ? { type: job.backoff.type, delay: job.backoff.delayMs } : undefined,
            delay: job && job.jitterMs > 0 ? Math.floor((this.o.random ?? Math.random)() * job.jitterMs) : undefined,
            // Keep finished jobs for a while so a late duplicate enqueue of the same run id is
            // still recognised; the ledger refuses a re-run of a finished run in any case.
            removeOnComplete: { age: this.o.keepCompletedSeconds ?? 3600 },
            removeOnFail: { age: 24 * 3600 },
          },
        };
      }),
    );
  }

  async inspect(runs: DeliverableRun[]): Promise<QueuedState[]> {
    const ledgerId = await this.o.ledger.identity();
    return Promise.all(
      runs.map(async (run): Promise<QueuedState> => {
        const id = bullmqJobId(ledgerId, run.runId);
        const state = await this.queue.getJobState(id);
        if (state === 'unknown') return { kind: 'missing' };
        if (state === 'completed') return { kind: 'completed' };
        if (state !== 'failed') return { kind: 'queued' };
        const job = await this.queue.getJob(id);
        return { kind: 'failed', reason: job?.failedReason ?? 'unknown reason' };
      }),
    );
  }

  async redeliver(runs: DeliverableRun[]): Promise<void> {
    if (runs.length === 0) return;
    const ledgerId = await this.o.ledger.identity();
    // A finished queue entry keeps its id for a while (removeOnComplete / removeOnFail) and would
    // swallow the new add; a missing one is gone already. remove() leaves an active job alone.
    await Promise.all(runs.map((run) => this.queue.remove(bullmqJobId(ledgerId, run.runId))));
    await this.enqueue(runs);
  }

  async cancel(runIds: bigint[]): Promise<void> {
    if (runIds.length === 0) return;
    const message: ControlMessage = { type: 'cancel', runIds: runIds.map(String) };
    await this.o.connection.publish(controlChannel(this.o.namespace), JSON.stringify(message));
  }

  async close(): Promise<void> {
    await this.queue.close();
  }
}
