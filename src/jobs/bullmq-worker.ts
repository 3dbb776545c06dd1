import { Worker, type Job } from 'bullmq';
import { Redis } from 'ioredis';
import type { Logger } from 'pino';
import { controlChannel, queueName } from './bullmq-names.js';
import type { RunJobData } from './bullmq-delivery.js';
import type { ControlMessage, ExecutionResult, RunExecutor } from './run-executor.js';

export interface BullmqWorkerOptions {
  redisUrl: string;
  namespace: string;
  executor: RunExecutor;
  logger: Logger;
  /** Runs this replica executes at once. Default 10. */
  concurrency?: number;
  /**
   * BullMQ's job lock: a worker that does not renew it for this long (paused, partitioned) loses
   * the job, which is then re-delivered. Default 30 s (BullMQ's own default).
   */
  lockDurationMs?: number;
  /** How often BullMQ looks for stalled jobs. Default half the lock duration. */
  stalledIntervalMs?: number;
}

/** Executes runs delivered by BullMQ on this replica, and listens for claims and cancels. */
export class BullmqWorker {
  private worker: Worker<RunJobData, ExecutionResult> | undefined;
  private subscriber: Redis | undefined;
  private publisher: Redis | undefined;
  private readonly shutdown = new AbortController();

  constructor(private readonly o: BullmqWorkerOptions) {}

  async start(): Promise<void> {
    const channel = controlChannel(this.o.namespace);
    this.subscriber = new Redis(this.o.redisUrl, { maxRetriesPerRequest: null });
    this.subscriber.on('error', (err) => this.o.logger.warn({ err }, 'control channel connection error'));
    this.subscriber.on('message', (_channel, raw) => {
      try {
        this.o.executor.onControl(JSON.parse(raw) as ControlMessage);
      } catch (err) {
        this.o.logger.warn({ err, raw }, 'bad control message');
      }
    });
    await this.subscriber.subscribe(channel);
    const lockDuration = this.o.lockDurationMs ?? 30_000;
    this.worker = new Worker<RunJobData, ExecutionResult>(
      queueName(this.o.namespace),
      (job: Job<RunJobData, ExecutionResult>) =>
        this.o.executor.execute(BigInt(job.data.runId), {
          finalAttempt: job.attemptsMade + 1 >= (job.opts.attempts ?? 1),
          signal: this.shutdown.signal,
        }),
      {
        connection: new Redis(this.o.redisUrl, { maxRetriesPerRequest: null }),
        concurrency: this.o.concurrency ?? 10,
        lockDuration,
        stalledInterval: this.o.stalledIntervalMs ?? Math.max(500, Math.floor(lockDuration / 2)),
        // A killed or paused worker's run is re-delivered; the ledger makes the repeat harmless.
        maxStalledCount: 10,
      },
    );
    this.worker.on('error', (err) => this.o.logger.warn({ err }, 'worker error'));
  }

  /** Publisher for claim announcements (shares nothing with the blocking worker connection). */
  publisherFor(): (message: ControlMessage) => Promise<void> {
    return async (message) => {
      this.publisher ??= new Redis(this.o.redisUrl, { maxRetriesPerRequest: 1 });
      await this.publisher.publish(controlChannel(this.o.namespace), JSON.stringify(message));
    };
  }

  /**
   * Stop taking runs; let running handlers finish for up to graceMs, then abort them through their
   * signal and close.
   */
  async close(graceMs = 10_000): Promise<void> {
    const worker = this.worker;
    this.worker = undefined;
    if (worker) {
      const closing = worker.close();
      const timer = setTimeout(() => this.shutdown.abort(new Error('replica shutting down')), graceMs);
      try {
        await closing;
      } finally {
        clearTimeout(timer);
      }
      await (worker.opts.connection as Redis).quit().catch(() => {});
    }
    await this.subscriber?.quit().catch(() => {});
    await this.publisher?.quit().catch(() => {});
    this.subscriber = undefined;
    this.publisher = undefined;
  }
}
