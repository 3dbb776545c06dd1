/**
 * Keeps a replica's runtime schedules current for as long as it runs, leader or follower (a
 * follower stands in with them, and is ready to lead with them): LISTEN on this namespace's channel
 * (every change NOTIFYs in its own transaction, delivered at commit), so a change reaches the fire
 * loop and the stand-in well within a second without polling; plus a cheap periodic reconcile (one
 * aggregate query) as the backstop for a notification lost with a dropped connection.
 */
import type pg from 'pg';
import type { Logger } from 'pino';
import type { Clock } from '../../clock.js';
import type { RuntimeJob, RuntimeSchedules } from './runtime-schedules.js';

/** What plans slots from the schedules (the fire loop, the stand-in): told which jobs changed. */
export interface Reschedulable {
  reschedule(jobs: readonly string[], sinceMs: (job: string) => number): Promise<void>;
}

export interface ScheduleSyncOptions {
  pool: pg.Pool;
  /** The namespace's NOTIFY channel (Tables.scheduleChannel). */
  channel: string;
  schedules: RuntimeSchedules;
  planners: readonly Reschedulable[];
  clock: Clock;
  logger: Logger;
  /** How often the backstop compares versions. Default 5 s. */
  reconcileMs?: number;
  /** Changes arriving within this long are applied together. Default 20 ms. */
  batchMs?: number;
}

export class ScheduleSync {
  private pending = new Set<string>();
  private flushing: Promise<void> = Promise.resolve();
  private flushQueued = false;
  private client: pg.PoolClient | undefined;
  private stopped = false;

  constructor(private readonly o: ScheduleSyncOptions) {}

  /**
   * LISTEN first (a change committed from now on is heard), then load every schedule, then keep
   * them current until `signal` aborts. Resolves once loaded (or once the load failed: the
   * reconcile loads from empty as well, so it retries); returns how many are held.
   */
  async start(signal: AbortSignal): Promise<number> {
    signal.addEventListener('abort', () => this.stop(), { once: true });
    await this.listen().catch((err: Error) =>
      this.o.logger.warn({ err }, 'could not LISTEN for schedule changes; the reconcile picks them up'),
    );
    this.enqueue(async () => {
      await this.o.schedules.load();
      return this.o.schedules.runtimeNames();
    });
    await this.flushing;
    if (this.pending.size > 0) this.queueFlush();
    void this.reconcileLoop(signal);
    return this.o.schedules.size;
  }

  /**
   * Bring the schedules up to date now, after whatever is already queued (a new tenure plans its
   * catch-up with them). Throws if the ledger cannot be read, as the tenure must not plan blind.
   */
  async current(): Promise<void> {
    let failure: Error | undefined;
    this.enqueue(() =>
      this.o.schedules.reconcile().catch((err: Error) => {
        failure = err;
        return [];
      }),
    );
    await this.flushing;
    if (failure) throw failure;
  }

  private async listen(): Promise<void> {
    if (this.stopped) return;
    const client = await this.o.pool.connect();
    client.on('notification', (msg) => {
      if (msg.channel !== this.o.channel || !msg.payload) return;
      const id = msg.payload.split(' ')[0]!;
      // "*": many changed at once (an import): compare versions rather than reload one by one.
      if (id === '*') this.enqueue(() => this.o.schedules.reconcile());
      else {
        this.pending.add(id);
        this.queueFlush();
      }
    });
    client.on('error', (err) => {
      this.o.logger.warn({ err }, 'schedule LISTEN connection lost; listening again');
      this.dropClient(err);
      if (!this.stopped) this.o.clock.setTimer(() => void this.relisten(), 1000);
    });
    await client.query(`LISTEN "${this.o.channel.replace(/"/g, '""')}"`);
    if (this.stopped) {
      client.release();
      return;
    }
    this.client = client;
  }

  private async relisten(): Promise<void> {
    await this.listen().catch((err: Error) => {
      this.o.logger.warn({ err }, 'could not LISTEN again; retrying');
      if (!this.stopped) this.o.clock.setTimer(() => void this.relisten(), 1000);
    });
    // Whatever changed while we were deaf.
    this.enqueue(() => this.o.schedules.reconcile());
  }

  private dropClient(err?: Error): void {
    const c = this.client;
    this.client = undefined;
    if (c) c.release(err ?? true);
  }

  stop(): void {
    this.stopped = true;
    const c = this.client;
    this.client = undefined;
    if (c)
      void c.query('UNLISTEN *').then(
        () => c.release(),
        (err: Error) => c.release(err),
      );
  }

  private queueFlush(): void {
    if (this.flushQueued) return;
    this.flushQueued = true;
    this.o.clock.setTimer(() => {
      this.flushQueued = false;
      const ids = [...this.pending];
      this.pending = new Set();
      this.enqueue(() => this.o.schedules.refresh(ids));
    }, this.o.batchMs ?? 20);
  }

  /** Apply changes one batch at a time, in order, then move the planners' timers. */
  private enqueue(change: () => Promise<string[]>): void {
    this.flushing = this.flushing
      .then(async () => {
        if (this.stopped) return;
        const names = await change();
        for (const planner of this.o.planners) await planner.reschedule(names, (name) => this.changedAt(name));
      })
      .catch((err: Error) => this.o.logger.warn({ err }, 'could not apply schedule changes; the reconcile retries'));
  }

  /** A schedule with no timer yet (new, resumed) starts from its latest change. */
  private changedAt(name: string): number {
    const job = this.o.schedules.get(name) as RuntimeJob | undefined;
    return (job?.schedule.changedAt ?? this.o.clock.now()) - 1;
  }

  private async reconcileLoop(signal: AbortSignal): Promise<void> {
    while (!signal.aborted) {
      await this.o.clock.sleep(this.o.reconcileMs ?? 5000, signal).catch(() => undefined);
      if (signal.aborted) return;
      this.enqueue(() => this.o.schedules.reconcile());
      await this.flushing;
    }
  }

  /** Resolves once every change heard so far is applied (tests). */
  settled(): Promise<void> {
    return this.flushing;
  }
}
