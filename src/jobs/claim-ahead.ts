/**
 * How far a worker claims runs ahead of its handler slots, from how long its handlers hold a slot.
 *
 * Claims ahead let the next runs' claims commit while the current ones run, and the more there are
 * the more runs each claim statement carries (its round trip and commit shared by them). But a run
 * claimed here waits here: a replica with slow handlers must not sit on runs another replica could
 * start, nor strand many of them should it die. So a worker claims up to `max` runs a slot ahead
 * while runs ahead would still wait no longer than WAIT_AHEAD_MS for a slot (quick handlers), and
 * `min` a slot otherwise (and before any handler has run). Once handlers are known to be slow, a
 * worker claims a delivery's runs only for handler slots free at once and hands the rest back to
 * the queue (handsBack; bullmq-worker.ts).
 *
 * Measured against a fixed 8 a slot, compiled, in turn (two pairs each, load 1.5-2.2): run-path
 * empty 13,644-13,865 runs/s against 11,625-11,781 (1.18x), CPU a run 0.099-0.102 ms against
 * 0.123 (PostgreSQL's 0.025 against 0.035: a claim and outcome statement carries about 79 runs of
 * each, not 32); run-path write 1.04-1.07x; 10,000 due, handler start p99 1,082-1,087 ms against
 * 1,235-1,261 (docs/benchmarks.md, "A fifteenth day").
 */

/** Claim further ahead than the least only while a run ahead would wait no longer than this for a slot. */
export const WAIT_AHEAD_MS = 50;

/** Weight of the newest handler's time in the running mean: about the last 20 runs. */
const WEIGHT = 0.05;

export class ClaimAhead {
  private meanMs: number | undefined;

  constructor(
    private readonly slots: number,
    private readonly min: number,
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
   * Whether a run that cannot start at once goes back to the queue rather than wait here: once
   * handlers are known to be slow (a slot frees less often than every WAIT_AHEAD_MS), a run waiting
   * here waits longer than one another replica with a free slot would start at once.
   */
  handsBack(): boolean {
    return this.meanMs !== undefined && !this.slotFreesWithin(WAIT_AHEAD_MS);
  }

  /** Places ahead of the handler slots, for all of them. */
  places(): number {
    if (this.meanMs === undefined) return this.min * this.slots;
    // The k-th run ahead of a slot waits about k handlers' time.
    const perSlot = this.meanMs <= 0 ? this.max : Math.floor(WAIT_AHEAD_MS / this.meanMs);
    return Math.min(this.max, Math.max(this.min, perSlot)) * this.slots;
  }
}
