import { setMaxListeners } from 'node:events';
import { Queue, WaitingError, Worker, type Job } from 'bullmq';
import { BackendUnavailableError, InvalidArgumentError, ShuttingDownError } from '../errors.js';
import { settlesWithin } from '../settles-within.js';
import { limitedWarn } from '../once-per-kind.js';
import { systemClock, type Clock, type TimerHandle } from '../clock.js';
import { Redis, type RedisOptions } from 'ioredis';
import type { Logger } from 'pino';
import { controlChannel, queueName } from './bullmq-names.js';
import { DEFAULT_DELIVERY_BATCH, type RunJobData } from './bullmq-delivery.js';
import type { ControlMessage, RunExecutor } from './run-executor.js';
import { handBackDelayMs } from './retry-backoff.js';
import { RunSlots } from './run-slots.js';
import { unwatchAbort, watchAbort } from './abort-watch.js';
import { ClaimAhead } from './claim-ahead.js';
import { LEND_AT_CALL_WITHIN_MS } from './slot-loan.js';
import { WorkerLiveness, type LivenessLedger } from './worker-liveness.js';
import { DeadDeliveries } from './dead-deliveries.js';

/**
 * Runs a worker holds (being claimed, waiting for a handler slot, running, being recorded) per
 * handler slot; of them, claimed ahead of busy slots, those that would wait no longer than
 * WAIT_AHEAD_MS for one (claim-ahead.ts), at most all (quick handlers), none before any handler has
 * ended. Runs being recorded do not count among those ahead, so the next claims commit while the
 * last outcomes are recorded.
 */
const RUNS_IN_HAND_PER_SLOT = 32;

/** How often a run whose row was held at the claim is tried again here before the sweep's turn. */
const LOCKED_TRIES = 6;

export interface BullmqWorkerOptions {
  /** Redis for BullMQ: a URL, or a client whose duplicates the worker uses (the client stays yours). */
  redisUrl?: string;
  redis?: Redis;
  namespace: string;
  executor: RunExecutor;
  logger: Logger;
  /** Handlers this replica runs at once (its handler slots; see slot-loan.ts). Default 10. */
  concurrency?: number;
  /** Runs per delivery the fire path makes (so enough deliveries are fetched to fill the slots). */
  deliveryBatch?: number;
  /**
   * BullMQ's lock on a delivery while its runs wait for free slots: a worker that dies holding one
   * loses it after this and the delivery goes to another worker. Claimed runs do not depend on it:
   * a run whose worker stopped beating is handed out again by the leader (see run-claims.ts).
   * Default 30 s (BullMQ's own default).
   */
  lockDurationMs?: number;
  /** How often BullMQ looks for stalled deliveries. Default half the lock duration. */
  stalledIntervalMs?: number;
  /**
   * On close: how long a handler may go on after its signal was aborted before it is abandoned
   * (its run handed back), and again how long close() then waits before it disconnects anyway.
   * So close(graceMs) returns within about graceMs + 2 × this. Default 1000.
   */
  shutdownMarginMs?: number;
  /**
   * The ledger this worker beats its liveness into and asks for runs of dead workers (see
   * worker-liveness.ts). Without it (unit tests), a killed worker's runs wait for someone else's.
   */
  liveness?: LivenessLedger;
  clock?: Clock;
}

/**
 * Executes runs delivered by BullMQ on this replica, and listens for claims and cancels. A
 * delivery (one BullMQ job) carries one run or a batch: the worker claims its runs as slots in hand
 * come free, in one statement per group of free slots, and the BullMQ job is done once every run of
 * it is claimed or found done; from then on a run is the ledger's business (its claim, its outcome,
 * its retry), not the queue's.
 */
export class BullmqWorker {
  private worker: Worker<RunJobData, { runs: number }> | undefined;
  private subscriber: Redis | undefined;
  private publisher: Redis | undefined;
  /** Runs in hand (being claimed, claimed and waiting for a handler slot, running, being recorded). */
  private readonly slots: RunSlots;
  /** Runs in hand that have no handler slot yet (being claimed, claimed and waiting for one). */
  private readonly ahead: RunSlots;
  /** Handler slots: the replica's concurrency. */
  private readonly handlers: RunSlots;
  /** How many places ahead `ahead` has, from how long handlers take. */
  private readonly claimAhead: ClaimAhead;
  /** Aborted as close() begins: deliveries stop claiming and hand their unclaimed runs back. */
  private readonly closing = new AbortController();
  /** Aborted after the grace period: handlers' ctx.signal. */
  private readonly shutdown = new AbortController();
  /** Aborted a margin later: stop waiting for handlers that ignore their signal. */
  private readonly abandon = new AbortController();
  /** Runs claimed (or being claimed) here whose handlers have not settled. */
  private readonly active = new Set<Promise<void>>();
  /** BullMQ's lock on a delivery (lockDurationMs). */
  private readonly lockMs: number;
  /** Handler slots lent out (slot-loan.ts): free, but each promised back to its run. */
  private lent = 0;
  /** Deliveries put off here while the ledger was unreachable. */
  private readonly later = new Set<TimerHandle>();
  private readonly clock: Clock;
  private liveness: WorkerLiveness | undefined;
  /** This worker's part in freeing dead workers' deliveries (with liveness). */
  private deadDeliveries: { redis: Redis; queue: Queue; deliveries: DeadDeliveries } | undefined;

  /** Connection errors repeat during a Redis restart or failover: the first of a kind, then one a minute. */
  private readonly warn: ReturnType<typeof limitedWarn>;

  constructor(private readonly o: BullmqWorkerOptions) {
    this.clock = o.clock ?? systemClock;
    this.lockMs = o.lockDurationMs ?? 30_000;
    this.warn = limitedWarn(o.logger, () => this.clock.monotonic());
    const concurrency = o.concurrency ?? 10;
    this.handlers = new RunSlots(concurrency);
    // Runs in hand: claimed ahead, so the next runs' claims commit while the current ones run, and
    // claims and finishes go many runs a statement. Measured (speed bench, 10,000 due, empty
    // handlers, concurrency 10): 4x drained 2,890 runs/s, 8x 3,410-3,750, 16x 3,710. With 8 in hand
    // a slot and no other bound, claims and outcomes took turns (a claim of 80 runs, then their
    // finish of 80, then the next claim); with 16 in hand of which 8 ahead, the next claims go while
    // the last outcomes are recorded (run-path empty, five pairs in turn: 0.98-1.14x the runs/s,
    // median 1.08; the write workload, whose outcomes commit in its group, 0.87-1.15x, median 0.96).
    // Since the outcomes and the next claims share one statement (run-ledger-batches.ts), taking
    // turns costs nothing, and quick handlers claim up to every place ahead (claim-ahead.ts).
    // 32, not 16: with 16 a slot, quick handlers' claim-and-outcome statements went one at a time
    // (1.0-1.1 in flight on average: the places a statement frees are the next one's), with 32
    // 1.8 in flight. Measured (speed --only perRun --pairs 3, in turn, load 1.8-2.5): empty
    // medians 0.95, 1.03, 0.95 of the raw worker against 0.82 and 0.80; write the same (run-path,
    // five pairs: median 1.48 against 1.46). Slower handlers claim no further ahead for it (the
    // 50 ms bound binds first). A worker that dies strands up to this many runs until its
    // liveness window ends, as a killed BullMQ worker strands its jobs until they stall.
    this.slots = new RunSlots(RUNS_IN_HAND_PER_SLOT * concurrency);
    this.claimAhead = new ClaimAhead(concurrency, RUNS_IN_HAND_PER_SLOT);
    this.ahead = new RunSlots(this.claimAhead.places());
    // Every run claimed ahead waits on this signal for a handler slot; every attempt follows
    // shutdown and abandon (more than `concurrency` of them while slots are lent, slot-loan.ts).
    setMaxListeners(0, this.closing.signal, this.shutdown.signal, this.abandon.signal);
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
    if (this.o.liveness) {
      this.liveness = new WorkerLiveness({
        ledger: this.o.liveness,
        worker: this.o.executor.replicaId,
        clock: this.clock,
        logger: this.o.logger,
        freePlaces: () => this.freePlaces(),
        deliver: (runId) => this.deliverOrphan(runId),
        deliveries: () => this.deadDeliveries?.deliveries,
      });
      await this.liveness.start();
    }
    this.worker = new Worker<RunJobData, { runs: number }>(
      queueName(this.o.namespace),
      (job: Job<RunJobData, { runs: number }>, token?: string) => this.process(job, token),
      {
        connection: this.connect({ maxRetriesPerRequest: null }),
        concurrency: this.deliveriesInHand(),
        lockDuration: this.lockMs,
        stalledInterval: this.o.stalledIntervalMs ?? Math.max(500, Math.floor(this.lockMs / 2)),
        // A killed or paused worker's delivery is made again; the ledger makes the repeat harmless.
        maxStalledCount: 10,
      },
    );
    this.worker.on('error', (err) => this.warn(`worker:${err.message}`, { err }, 'worker error'));
    if (this.o.liveness) this.watchDeliveries(this.worker.id, this.o.liveness.claimerLiveWithinMs);
  }

  /** Beat under this BullMQ worker's id, and sweep dead workers' deliveries (dead-deliveries.ts). */
  private watchDeliveries(owner: string, windowMs: number): void {
    const redis = this.connect({ maxRetriesPerRequest: 1 });
    redis.on('error', (err) => this.warn(`deliveries:${err.message}`, { err }, 'deliveries connection error'));
    const queue = new Queue(queueName(this.o.namespace), { connection: redis });
    const deliveries = new DeadDeliveries({ queue, redis, owner, name: this.o.executor.replicaId, windowMs });
    this.deadDeliveries = { redis, queue, deliveries };
    // Beaten again at each of the liveness beats; an earlier start's deliveries go back at once.
    void deliveries
      .beat()
      .then(() => deliveries.earlierStarts())
      .then(
        (moved) => {
          if (moved > 0)
            this.o.logger.warn(
              { deliveries: moved },
              'deliveries an earlier start of this worker held: back to the queue',
            );
        },
        (err: Error) =>
          this.warn(`deliveries:${err.message}`, { err }, 'could not look for deliveries an earlier start held'),
      );
  }

  /** Runs whose handlers are running on this worker. */
  get running(): number {
    return this.handlers.busy;
  }

  /**
   * Deliveries in hand: enough batches to fill the places ahead, and one more fetched ahead. One
   * while handing back (ClaimAhead.handsBack): its runs that can neither start nor wait go back to
   * the queue (process), and the next is fetched once one could (untilStartable).
   */
  private deliveriesInHand(): number {
    if (this.claimAhead.handsBack()) return 1;
    return Math.max(2, Math.ceil(this.ahead.size / (this.o.deliveryBatch ?? DEFAULT_DELIVERY_BATCH)) + 1);
  }

  /** A handler held its slot `ms`: claim further ahead, or less far, from now on. */
  private handlerTook(ms: number): void {
    const places = this.claimAhead.observe(ms);
    if (places !== this.ahead.size) this.ahead.resize(places);
    const inHand = this.deliveriesInHand();
    if (this.worker && this.worker.concurrency !== inHand) this.worker.concurrency = inHand;
  }

  /**
   * One delivery: claim its runs as slots come free and start their handlers. Done once every run
   * is claimed (or found done or held by another live attempt). Closing, or while handing back
   * (ClaimAhead.handsBack) with no run startable, the runs not claimed yet go back to the front of
   * the wait list (Job.moveToWait; WaitingError tells BullMQ the delivery is neither completed nor
   * failed) for another replica; the worker then waits until a run would be startable before it
   * fetches again (found from outside: with handlers working 1 s, runs waited 1-4 s in one
   * replica's deliveries while others had free slots).
   */
  private async process(job: Job<RunJobData, { runs: number }>, token: string | undefined): Promise<{ runs: number }> {
    const ids = job.data.runIds ?? [job.data.runId];
    const traceparents = job.data.traceparents ?? [job.data.traceparent ?? null];
    const claims: Promise<boolean>[] = [];
    const fetchedAt = this.clock.monotonic();
    let next = 0;
    while (next < ids.length) {
      const n = this.closing.signal.aborted ? 0 : await this.takeForDelivery(ids.length - next);
      if (n === 0) {
        await Promise.all(claims);
        await this.handBack(job, token, ids.slice(next), traceparents.slice(next));
        // Done before BullMQ would renew the lock the delivery no longer has (its renewal looks at
        // deliveries held over a quarter of the lock).
        await this.untilStartable(fetchedAt + this.lockMs / 5 - this.clock.monotonic());
        throw new WaitingError();
      }
      for (let k = 0; k < n; k++, next++) {
        claims.push(this.deliver(BigInt(ids[next]!), traceparents[next] ?? undefined, job.data.deferrals ?? 0));
      }
    }
    await Promise.all(claims);
    return { runs: ids.length };
  }

  /**
   * Places for a delivery's next runs: as takeInHand, but while handing back only for runs that
   * start at once or may wait (startable), and 0 (nothing taken) when none would.
   */
  private takeForDelivery(want: number): Promise<number> {
    if (!this.claimAhead.handsBack()) return this.takeInHand(want);
    const n = Math.min(want, this.startable());
    return n > 0 ? this.takeInHand(n) : Promise.resolve(0);
  }

  /**
   * Runs that would have a handler slot at once, or may wait for one (ClaimAhead.waiting): free
   * slots and the runs that may wait, less those promised (to runs claimed ahead, or lent).
   */
  private startable(): number {
    const places = this.handlers.size + this.claimAhead.waiting();
    return places - this.handlers.busy - this.ahead.busy - this.lent;
  }

  /** Places for runs of dead workers: in hand and ahead; while handing back, startable ones only. */
  private freePlaces(): number {
    const ahead = this.claimAhead.handsBack() ? this.startable() : this.ahead.size - this.ahead.busy;
    return Math.min(this.slots.size - this.slots.busy, ahead);
  }

  /** Waits until a run is startable, at most `maxMs`; not at all once closing. */
  private untilStartable(maxMs: number): Promise<void> {
    if (maxMs <= 0 || this.closing.signal.aborted || this.startable() > 0) return Promise.resolve();
    return new Promise((resolve) => {
      const check = () => {
        if (this.startable() > 0) done();
      };
      // A run given up frees a place ahead only; one ended, a handler slot.
      const unwatch = [this.handlers.watch(check), this.ahead.watch(check)];
      const timer = this.clock.setTimer(() => done(), maxMs);
      const done = () => {
        for (const stop of unwatch) stop();
        timer.cancel();
        unwatchAbort(this.closing.signal, done);
        resolve();
      };
      watchAbort(this.closing.signal, done);
    });
  }

  /**
   * Take between 1 and `want` places in hand, each also a place ahead of the handler slots; 0 once
   * closing. In hand first, then ahead, always in that order (so two callers never wait on each
   * other's); places in hand beyond the ones ahead are given back.
   */
  private async takeInHand(want: number): Promise<number> {
    const n = await this.slots.take(want, this.closing.signal);
    if (n === 0) return 0;
    const ahead = await this.ahead.take(n, this.closing.signal);
    if (ahead < n) this.slots.give(n - ahead);
    return ahead;
  }

  /** Claim and run one run in a slot already taken; resolves once it is claimed (true) or not. */
  private deliver(runId: bigint, traceparent: string | undefined, deferrals: number): Promise<boolean> {
    let claimed!: (claimedHere: boolean) => void;
    const claimDone = new Promise<boolean>((resolve) => (claimed = resolve));
    let handling = false; // this run holds a handler slot
    let lentOut = false; // its slot is lent while its ctx.transaction waits on a group commit
    let handlerDone = false;
    let heldSince: number | undefined; // since when its handler holds a slot (not while it is lent)
    let heldMs = 0;
    let started = false;
    const hold = (holding: boolean) => {
      const now = this.clock.monotonic();
      if (heldSince !== undefined) heldMs += now - heldSince;
      heldSince = holding ? now : undefined;
      started ||= holding;
    };
    let ahead = true; // it holds a place ahead of the handler slots (until it has one, or is over)
    const leaveAhead = () => {
      if (!ahead) return;
      ahead = false;
      this.ahead.give();
    };
    // The run is over here: its places go back.
    const over = () => {
      claimed(false); // no-op once the claim was decided
      if (handling) this.handlers.give();
      if (lentOut) this.lent--; // never taken back: not promised any more
      lentOut = false;
      leaveAhead();
      this.slots.give();
      this.active.delete(run);
    };
    const run: Promise<void> = this.o.executor
      .execute(runId, {
        signal: this.shutdown.signal,
        abandon: this.abandon.signal,
        traceparent,
        onClaimed: claimed,
        startWhen: async () => {
          handling = (await this.handlers.take(1, this.closing.signal)) === 1;
          if (handling) hold(true);
          leaveAhead();
          return handling;
        },
        onHandlerDone: () => {
          handlerDone = true;
          hold(false);
          if (started) this.handlerTook(heldMs);
          if (handling) this.handlers.give();
          handling = false;
        },
        slotLoan: {
          lendsAtCall: () => this.claimAhead.slotFreesWithin(LEND_AT_CALL_WITHIN_MS),
          lend: () => {
            if (!handling) return;
            handling = false;
            lentOut = true;
            this.lent++;
            hold(false);
            this.handlers.give();
          },
          // Not given up on closing: the handler is mid-run and must get its answer to finish.
          takeBack: async () => {
            if (!lentOut) return;
            lentOut = false;
            this.lent--;
            const n = await this.handlers.take(1, undefined, { ahead: true });
            // Abandoned on shutdown while its transaction was committing: its slot goes straight back.
            if (handlerDone) this.handlers.give(n);
            else {
              handling = n === 1;
              if (handling) hold(true);
            }
          },
        },
      })
      // Settled in the two callbacks, not with a .finally() after them: one promise less a run.
      .then(
        (result) => {
          try {
            // Its row was held by another statement at the claim: again in a moment (a few times).
            if (result.status === 'locked' && deferrals < LOCKED_TRIES)
              this.tryLater(runId, traceparent, deferrals + 1, Math.min(1000, 20 * 2 ** deferrals));
            // Delivered before its backoff or delay ended (the queue's clock ran ahead of the ledger's).
            if (result.status === 'early') this.tryLater(runId, traceparent, deferrals, (result.waitMs ?? 0) + 50);
          } finally {
            over();
          }
        },
        (err: unknown) => {
          try {
            // A handler's failure is recorded, and its retry queued, by the executor.
            if (err instanceof BackendUnavailableError)
              this.tryLater(runId, traceparent, deferrals + 1, handBackDelayMs(deferrals), err);
          } finally {
            over();
          }
        },
      );
    this.active.add(run);
    return claimDone;
  }

  /** A run whose worker stopped beating: claim it here, as a delivered one, once a place is free. */
  private async deliverOrphan(runId: bigint): Promise<boolean> {
    return (await this.takeInHand(1)) === 1 && (await this.deliver(runId, undefined, 0));
  }

  /**
   * The ledger was unreachable (at the claim, or before the outcome was recorded): nothing of the
   * attempt committed. Try this run again here after a backoff, without using up a retry; a run
   * claimed here stays this replica's until then (if it dies, a live worker takes it over). Also
   * for a claim that found the run's row held by another statement (a short wait, a few tries;
   * after that the leader's sweep hands the run over again).
   */
  private tryLater(
    runId: bigint,
    traceparent: string | undefined,
    deferrals: number,
    delayMs: number,
    unavailable?: BackendUnavailableError,
  ): void {
    if (unavailable)
      this.o.logger.warn({ runId: runId.toString(), delayMs }, 'ledger unavailable: delivering the run again later');
    const timer = this.clock.setTimer(() => {
      this.later.delete(timer);
      if (this.closing.signal.aborted) return;
      void this.takeInHand(1).then((n) => {
        if (n === 1) void this.deliver(runId, traceparent, deferrals);
      });
    }, delayMs);
    this.later.add(timer);
  }

  /** Closing with runs of a delivery not yet claimed: they go back to the queue for another replica. */
  private async handBack(
    job: Job<RunJobData, { runs: number }>,
    token: string | undefined,
    ids: string[],
    traceparents: (string | null)[],
  ): Promise<void> {
    if (!token) return;
    try {
      await job.updateData({
        ...job.data,
        runId: ids[0]!,
        runIds: ids,
        ...(job.data.traceparents ? { traceparents } : {}),
      });
      await job.moveToWait(token);
    } catch (err) {
      // Lock lost (another worker has it) or Redis unreachable: BullMQ's stalled check re-delivers it.
      this.o.logger.warn({ err, runIds: ids }, 'could not hand unclaimed runs back to the queue');
    }
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
   * Stop taking runs (unclaimed runs of the deliveries in hand go back to the queue); let running
   * handlers finish for up to graceMs, then abort them through their signal. A handler that stops
   * is recorded as interrupted and its run handed back to the queue for another replica. One that
   * ignores its signal for shutdownMarginMs more is abandoned the same way (its later
   * ctx.transaction / ctx.fence calls are refused, and a newer claim fences out anything else).
   * Bounded: returns within about graceMs + 2 × shutdownMarginMs (a few margins more only if Redis
   * itself stops answering: each connection's quit is bounded by the margin).
   */
  async close(graceMs = 10_000): Promise<void> {
    const margin = this.o.shutdownMarginMs ?? 1000;
    this.closing.abort(new ShuttingDownError());
    for (const t of this.later) t.cancel();
    this.later.clear();
    const worker = this.worker;
    this.worker = undefined;
    const timers = [
      setTimeout(() => this.shutdown.abort(new ShuttingDownError()), graceMs),
      setTimeout(() => this.abandon.abort(new ShuttingDownError('handler abandoned')), graceMs + margin),
    ];
    try {
      const handlers = Promise.all(this.active);
      const closing = worker ? Promise.all([worker.close(), handlers]) : handlers;
      if (!(await settlesWithin(closing, graceMs + 2 * margin))) {
        this.o.logger.warn({ graceMs, marginMs: margin }, 'worker did not close in time; disconnecting');
        if (worker) await settlesWithin(worker.disconnect(), margin);
      }
    } finally {
      for (const t of timers) clearTimeout(t);
    }
    // Handlers are over: what this worker still holds (an outcome it could not record) is for others.
    await this.liveness?.stop();
    if (this.deadDeliveries) {
      const { queue, redis, deliveries } = this.deadDeliveries;
      this.deadDeliveries = undefined;
      // Delisted: what it still holds (none after a clean close) is BullMQ's lock's, as before.
      await settlesWithin(deliveries.forget(), margin);
      await settlesWithin(queue.close(), margin);
      if (!(await settlesWithin(redis.quit(), margin))) redis.disconnect();
    }
    if (worker) {
      const connection = worker.opts.connection as Redis;
      if (!(await settlesWithin(connection.quit(), margin))) connection.disconnect();
    }
    for (const conn of [this.subscriber, this.publisher]) {
      if (conn && !(await settlesWithin(conn.quit(), margin))) conn.disconnect();
    }
    this.subscriber = undefined;
    this.publisher = undefined;
  }
}
