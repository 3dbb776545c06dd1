/**
 * How far a worker claims runs ahead of its handler slots, from how long its handlers hold a slot.
 *
 * Claims ahead let the next runs' claims commit while the current ones run, and the more there are
 * the more runs each claim statement carries (its round trip and commit shared by them). But a run
 * claimed here waits here: a replica with slow handlers must not sit on runs another replica could
 * start, nor strand many of them should it die. So runs claimed ahead of busy handler slots are
 * held to those that would wait no longer than WAIT_AHEAD_MS for one (the k-th waits about k
 * handlers' time over the slots): with quick handlers many, up to `max` a slot. Before any handler
 * has ended, and once handlers are known to take longer than WAIT_AHEAD_MS, fewer runs than slots
 * may wait (none before): a worker then claims a delivery's runs only for handler slots free at
 * once and those few, and hands the rest back to the queue rather than hold them in its delivery
 * (handsBack; bullmq-worker.ts). So a replica just started takes no more than it can start, as a
 * BullMQ worker takes no more jobs than its concurrency, until its handlers show they are quick.
 * Found from outside: runs of 1 s handlers waited 1-4 s in one replica's deliveries while others
 * had free slots; and a replica restarted after a kill took 8 runs a slot ahead before its first
 * handlers ended, each second after a kill 1 s late. (With 8 a slot claimed ahead whatever the
 * handlers took, a run of 100 ms handlers could wait 800 ms.)
 *
 * Measured against a fixed 8 a slot, compiled, in turn (two pairs each, load 1.5-2.2): run-path
 * empty 13,644-13,865 runs/s against 11,625-11,781 (1.18x), CPU a run 0.099-0.102 ms against
 * 0.123 (PostgreSQL's 0.025 against 0.035: a claim and outcome statement carries about 79 runs of
 * each, not 32); run-path write 1.04-1.07x; 10,000 due, handler start p99 1,082-1,087 ms against
 * 1,235-1,261 (docs/benchmarks.md, "A fifteenth day").
 */

/** A run claimed ahead of busy handler slots waits no longer than this for one (on average). */
export const WAIT_AHEAD_MS = 50;

/** Weight of the newest handler's time in the running mean: about the last 20 runs. */
const WEIGHT = 0.05;

export class ClaimAhead {
  private meanMs: number | undefined;

  constructor(
    private readonly slots: number,
    private readonly max: number,
  ) {}

  /** A handler held its slot `ms`; the places ahead wanted from now on. */
  observe(ms: number): number {
    const t = Math.max(0, ms);
    this.meanMs = this.meanMs === undefined ? t : this.meanMs + (t - this.meanMs) * WEIGHT;
    return this.places();
  }

  /** Whether, with every slot busy, one comes free within `ms` on average (false before any handler ran). */
  slotFreesWithin(ms: number): boolean {
    return this.meanMs !== undefined && this.meanMs / this.slots <= ms;
  }

  /**
   * Runs claimed ahead that may wait for a handler slot while every slot is busy: as many as would
   * wait no longer than WAIT_AHEAD_MS for one, at most `max` a slot; none before any handler has
   * ended.
   */
  waiting(): number {
    if (this.meanMs === undefined) return 0;
    if (this.meanMs <= 0) return this.max * this.slots;
    // The k-th run waiting for a slot waits about k handlers' time over the slots.
    return Math.min(this.max * this.slots, Math.floor((WAIT_AHEAD_MS * this.slots) / this.meanMs));
  }

  /**
   * Whether a delivery's runs that can neither start at once nor wait (waiting()) go back to the
   * queue rather than wait in this worker's delivery: before any handler has ended, and once
   * handlers are known to take longer than WAIT_AHEAD_MS, fewer runs than slots may wait, and a
   * delivery's others would (or might) wait longer than another replica with a free slot would take
   * to start them.
   */
  handsBack(): boolean {
    return this.waiting() < this.slots;
  }

  /**
   * Places ahead of the handler slots (runs being claimed, or claimed and waiting for one): the runs
   * that may wait; while handing back, also room for runs claimed for free slots.
   */
  places(): number {
    return this.handsBack() ? this.slots + this.waiting() : this.waiting();
  }
}
