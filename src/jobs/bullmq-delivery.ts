import { Queue } from 'bullmq';
import type { Redis } from 'ioredis';
import type { JobRegistry } from './job-registry.js';
import type { DeliverableRun, RunDelivery } from '../scheduler/run-delivery.js';
import { bullmqJobId, controlChannel, queueName } from './bullmq-names.js';
import type { ControlMessage } from './run-executor.js';

export interface RunJobData {
  runId: string;
  job: string;
  scheduledAt: string;
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
    },
  ) {
    this.queue = new Queue<RunJobData>(queueName(o.namespace), { connection: o.connection });
  }

  async enqueue(runs: DeliverableRun[]): Promise<void> {
    if (runs.length === 0) return;
    const ledgerId = await this.o.ledger.identity();
    await this.queue.addBulk(
      runs.map((run) => {
        const job = this.o.registry.get(run.job);
        return {
          name: run.job,
          data: { runId: run.runId.toString(), job: run.job, scheduledAt: run.scheduledAt.toISOString() },
          opts: {
            jobId: bullmqJobId(ledgerId, run.runId),
            attempts: (job?.retries ?? 0) + 1,
            backoff: job ? { type: job.backoff.type, delay: job.backoff.delayMs } : undefined,
            delay: job && job.jitterMs > 0 ? Math.floor(Math.random() * job.jitterMs) : undefined,
            // Keep finished jobs for a while so a late duplicate enqueue of the same run id is
            // still recognised; the ledger refuses a re-run of a finished run in any case.
            removeOnComplete: { age: this.o.keepCompletedSeconds ?? 3600 },
            removeOnFail: { age: 24 * 3600 },
          },
        };
      }),
    );
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
