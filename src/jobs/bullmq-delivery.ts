import { Queue, type JobsOptions } from 'bullmq';
import type { Redis } from 'ioredis';
import type { JobRegistry } from './job-registry.js';
import { handlerOf } from '../scheduler/schedules/runtime-schedules.js';
import type { DeliverableRun, QueuedState, RunDelivery } from '../scheduler/firing/run-delivery.js';
import { batchJobId, bullmqJobId, controlChannel, queueName, redeliveryJobId } from './bullmq-names.js';
import type { ControlMessage } from './run-executor.js';

/**
 * What a BullMQ job carries: one run, or a batch of runs handed over together (`runIds`; the
 * first run is also in `runId`, `job` and `scheduledAt`, the single-run shape).
 */
export interface RunJobData {
  runId: string;
  job: string;
  scheduledAt: string;
  /** The committing fire's trace context, so the attempt's span continues its trace. */
  traceparent?: string;
  /** A batch: every run's id, in ascending order (the first is `runId`). */
  runIds?: string[];
  /** A batch: each run's traceparent, or null. */
  traceparents?: (string | null)[];
  /** How often this delivery was put off because the ledger was unreachable (its backoff grows). */
  deferrals?: number;
}

/**
 * Runs per BullMQ job when the fire path hands many over at once. Each BullMQ job costs Redis and
 * Node the same whatever it carries, and a worker claims a delivery's runs as its slots free up
 * whatever its size, so larger deliveries are cheaper; a worker that cannot start them all hands
 * the rest back (bullmq-worker.ts). Measured against 10, in turn (docs/benchmarks.md, "A
 * twenty-third day"): Redis CPU a run about halved; empty handlers 10,949-11,675 runs/s against
 * 10,109-10,370 (run-path, three pairs), 0.73x and 0.94x the raw worker against 0.63x and 0.82x
 * (speed, two pairs); the write and fire paths alike within the noise.
 */
export const DEFAULT_DELIVERY_BATCH = 25;

/**
 * Hands committed runs to BullMQ: many runs per job (a worker claims them in one statement), one
 * run per job when it waits (a job's jitter, a retry's backoff). Retries are the ledger's: the
 * worker that records a failed attempt queues the run's next delivery after the job's backoff.
 */
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
      /** Runs per BullMQ job. Default DEFAULT_DELIVERY_BATCH. */
      batchSize?: number;
      /** The source of delivery jitter (a job's jitterMs); injectable so tests can fix it. Default Math.random. */
      random?: () => number;
    },
  ) {
    this.queue = new Queue<RunJobData>(queueName(o.namespace), { connection: o.connection });
  }

  async enqueue(runs: DeliverableRun[]): Promise<void> {
    if (runs.length === 0) return;
    const ledgerId = await this.o.ledger.identity();
    const random = this.o.random ?? Math.random;
    const now: DeliverableRun[] = [];
    const jobs: { name: string; data: RunJobData; opts: JobsOptions }[] = [];
    const nowMs = Date.now();
    for (const run of runs) {
      const jitterMs = this.o.registry.get(handlerOf(run.job))?.jitterMs ?? 0;
      const waitMs = run.availableAt ? run.availableAt.getTime() - nowMs : 0;
      if (jitterMs > 0 || waitMs > 0)
        jobs.push(this.single(ledgerId, run, Math.max(0, waitMs) + Math.floor(jitterMs > 0 ? random() * jitterMs : 0)));
      else now.push(run);
    }
    const size = Math.max(1, this.o.batchSize ?? DEFAULT_DELIVERY_BATCH);
    const ordered = [...now].sort((a, b) => (a.runId < b.runId ? -1 : a.runId > b.runId ? 1 : 0));
    for (let i = 0; i < ordered.length; i += size) jobs.push(this.batch(ledgerId, ordered.slice(i, i + size)));
    await this.queue.addBulk(jobs);
  }

  /**
   * Hand runs committed outside the fire loop (workflow steps made ready by a completion) to the
   * queue, then mark them handed over so the outbox leaves them alone.
   */
  async handOver(
    runs: readonly (DeliverableRun & { attempts?: number })[],
    markEnqueued: (runIds: bigint[]) => Promise<void>,
  ): Promise<void> {
    if (runs.length === 0) return;
    // A run claimed before (a step run made again by a retry) gets a job id of its own attempt.
    const again = runs.filter((r) => (r.attempts ?? 0) > 0);
    await this.enqueue(runs.filter((r) => (r.attempts ?? 0) === 0));
    await Promise.all(again.map((r) => this.redeliverAfter({ runId: r.runId, attempt: r.attempts! }, 0)));
    await markEnqueued(runs.map((r) => r.runId));
  }

  /** Hand one run over again after its `attempt`-th claim, delivered after `delayMs`. */
  async redeliverAfter(run: { runId: bigint; attempt: number }, delayMs: number): Promise<void> {
    const ledgerId = await this.o.ledger.identity();
    const id = redeliveryJobId(ledgerId, run.runId, run.attempt);
    await this.queue.add(
      'run',
      { runId: run.runId.toString(), job: '', scheduledAt: '' },
      { ...this.keep(), jobId: id, delay: delayMs > 0 ? Math.round(delayMs) : undefined },
    );
  }

  private single(ledgerId: string, run: DeliverableRun, delayMs: number) {
    return {
      name: run.job,
      data: runData(run),
      opts: { ...this.keep(), jobId: bullmqJobId(ledgerId, run.runId), delay: delayMs > 0 ? delayMs : undefined },
    };
  }

  private batch(ledgerId: string, runs: DeliverableRun[]) {
    if (runs.length === 1) return this.single(ledgerId, runs[0]!, 0);
    const first = runs[0]!;
    return {
      name: runs.every((r) => r.job === first.job) ? first.job : 'runs',
      data: {
        ...runData(first),
        runIds: runs.map((r) => r.runId.toString()),
        ...(runs.some((r) => r.traceparent) ? { traceparents: runs.map((r) => r.traceparent ?? null) } : {}),
      },
      opts: {
        ...this.keep(),
        jobId: batchJobId(
          ledgerId,
          runs.map((r) => r.runId),
        ),
      },
    };
  }

  /**
   * Keep finished jobs for a while so a late duplicate enqueue of the same id is still recognised;
   * the ledger refuses a re-run of a finished run in any case. One try: retries are the ledger's.
   */
  private keep(): JobsOptions {
    return {
      attempts: 1,
      removeOnComplete: { age: this.o.keepCompletedSeconds ?? 3600 },
      removeOnFail: { age: 24 * 3600 },
    };
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
    // One run per job: a batch's id could be an old batch's that BullMQ still keeps.
    await Promise.all(runs.map((run) => this.queue.remove(bullmqJobId(ledgerId, run.runId))));
    await this.queue.addBulk(runs.map((run) => this.single(ledgerId, run, 0)));
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

function runData(run: DeliverableRun): RunJobData {
  return {
    runId: run.runId.toString(),
    job: run.job,
    scheduledAt: run.scheduledAt.toISOString(),
    ...(run.traceparent ? { traceparent: run.traceparent } : {}),
  };
}
