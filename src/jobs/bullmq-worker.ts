import { DelayedError, WaitingError, Worker, type Job } from 'bullmq';
import { BackendUnavailableError, InvalidArgumentError, ShuttingDownError } from '../errors.js';
import { settlesWithin } from '../settles-within.js';
import { limitedWarn } from '../once-per-kind.js';
import { systemClock, type Clock } from '../clock.js';
import { Redis, type RedisOptions } from 'ioredis';
import type { Logger } from 'pino';
import { controlChannel, queueName } from './bullmq-names.js';
import type { RunJobData } from './bullmq-delivery.js';
import type { ControlMessage, ExecutionResult, RunExecutor } from './run-executor.js';

export interface BullmqWorkerOptions {
  /** Redis for BullMQ: a URL, or a client whose duplicates the worker uses (the client stays yours). */
  redisUrl?: string;
  redis?: Redis;
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
  /**
   * On close: how long a handler may go on after its signal was aborted before it is abandoned
   * (its run handed back), and again how long close() then waits before it disconnects anyway.
   * So close(graceMs) returns within about graceMs + 2 × this. Default 1000.
   */
  shutdownMarginMs?: number;
  clock?: Clock;
}

/** Executes runs delivered by BullMQ on this replica, and listens for claims and cancels. */
export class BullmqWorker {
  private worker: Worker<RunJobData, ExecutionResult> | undefined;
  private subscriber: Redis | undefined;
  private publisher: Redis | undefined;
  /** Aborted after the grace period: handlers' ctx.signal. */
  private readonly shutdown = new AbortController();
  /** Aborted a margin later: stop waiting for handlers that ignore their signal. */
  private readonly abandon = new AbortController();

  /** Connection errors repeat during a Redis restart or failover: the first of a kind, then one a minute. */
  private readonly warn: ReturnType<typeof limitedWarn>;

  constructor(private readonly o: BullmqWorkerOptions) {
    this.warn = limitedWarn(o.logger, () => (o.clock ?? systemClock).monotonic());
  }

  async start(): Promise<void> {
    const channel = controlChannel(this.o.namespace);
    this.subscriber = this.connect({ maxRetriesPerRequest: null });
    this.subscriber.on('error', (err) =>
      this.warn(`control:${err.message}`, { err }, 'control channel connection error'),
    );
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
      (job: Job<RunJobData, ExecutionResult>, token?: string) => this.process(job, token),
      {
        connection: this.connect({ maxRetriesPerRequest: null }),
        concurrency: this.o.concurrency ?? 10,
        lockDuration,
        stalledInterval: this.o.stalledIntervalMs ?? Math.max(500, Math.floor(lockDuration / 2)),
        // A killed or paused worker's run is re-delivered; the ledger makes the repeat harmless.
        maxStalledCount: 10,
      },
    );
    this.worker.on('error', (err) => this.warn(`worker:${err.message}`, { err }, 'worker error'));
  }

  /**
   * One delivery. A run interrupted by this replica's shutdown goes back to the front of the wait
   * list (Job.moveToWait: the lock is released, attemptsMade is untouched, so no retry is used
   * up) and another replica picks it up at once; throwing WaitingError tells BullMQ not to treat
   * the delivery as completed or failed.
   */
  private async process(job: Job<RunJobData, ExecutionResult>, token: string | undefined): Promise<ExecutionResult> {
    let result: ExecutionResult;
    try {
      result = await this.o.executor.execute(BigInt(job.data.runId), {
        finalAttempt: job.attemptsMade + 1 >= (job.opts.attempts ?? 1),
        signal: this.shutdown.signal,
        abandon: this.abandon.signal,
        traceparent: job.data.traceparent,
      });
    } catch (err) {
      if (!(err instanceof BackendUnavailableError) || !token) throw err;
      // The ledger is unreachable: not the handler's failure.
      this.o.logger.warn({ err, runId: job.data.runId }, 'ledger unavailable: delivering the run again later');
      return this.deliverLater(job, token);
    }
    // A job this replica does not define: a replica that does (newer code) takes it later.
    if (result.status === 'unknown-job' && token) return this.deliverLater(job, token);
    if (result.status !== 'interrupted') return result;
    if (token) {
      try {
        await job.moveToWait(token);
      } catch (err) {
        // Lock lost (another worker has it) or Redis unreachable: BullMQ's stalled check re-delivers it.
        this.o.logger.warn({ err, runId: job.data.runId }, 'could not hand the interrupted run back to the queue');
      }
    }
    throw new WaitingError();
  }

  /**
   * Deliver the run again after a backoff that grows with each such delay, without using up one of
   * the job's attempts (BullMQ counts none for a job moved to delayed with DelayedError).
   */
  private async deliverLater(job: Job<RunJobData, ExecutionResult>, token: string): Promise<never> {
    const delays = Math.max(0, job.attemptsStarted - job.attemptsMade - 1);
    const delayMs = Math.min(30_000, 500 * 2 ** Math.min(delays, 6));
    await job.moveToDelayed(Date.now() + delayMs, token);
    throw new DelayedError();
  }

  private connect(options: RedisOptions): Redis {
    if (this.o.redis) return this.o.redis.duplicate(options);
    if (!this.o.redisUrl) throw new InvalidArgumentError('BullmqWorker needs redisUrl or redis');
    return new Redis(this.o.redisUrl, options);
  }

  /** Publisher for claim announcements (shares nothing with the blocking worker connection). */
  publisherFor(): (message: ControlMessage) => Promise<void> {
    return async (message) => {
      if (!this.publisher) {
        this.publisher = this.connect({ maxRetriesPerRequest: 1 });
        this.publisher.on('error', (err) =>
          this.warn(`publisher:${err.message}`, { err }, 'control channel connection error'),
        );
      }
      await this.publisher.publish(controlChannel(this.o.namespace), JSON.stringify(message));
    };
  }

  /**
   * Stop taking runs; let running handlers finish for up to graceMs, then abort them through their
   * signal. A handler that stops is recorded as interrupted and its run handed back to the queue
   * for another replica. One that ignores its signal for shutdownMarginMs more is abandoned the
   * same way (its later ctx.transaction / ctx.fence calls are refused, and a newer claim fences
   * out anything else). Bounded: returns within about graceMs + 2 × shutdownMarginMs (a few margins
   * more only if Redis itself stops answering: each connection's quit is bounded by the margin).
   */
  async close(graceMs = 10_000): Promise<void> {
    const margin = this.o.shutdownMarginMs ?? 1000;
    const worker = this.worker;
    this.worker = undefined;
    if (worker) {
      const connection = worker.opts.connection as Redis;
      const closing = worker.close();
      const timers = [
        setTimeout(() => this.shutdown.abort(new ShuttingDownError()), graceMs),
        setTimeout(() => this.abandon.abort(new ShuttingDownError('handler abandoned')), graceMs + margin),
      ];
      try {
        if (!(await settlesWithin(closing, graceMs + 2 * margin))) {
          this.o.logger.warn({ graceMs, marginMs: margin }, 'worker did not close in time; disconnecting');
          await settlesWithin(worker.disconnect(), margin);
        }
      } finally {
        for (const t of timers) clearTimeout(t);
      }
      if (!(await settlesWithin(connection.quit(), margin))) connection.disconnect();
    }
    for (const conn of [this.subscriber, this.publisher]) {
      if (conn && !(await settlesWithin(conn.quit(), margin))) conn.disconnect();
    }
    this.subscriber = undefined;
    this.publisher = undefined;
  }
}
