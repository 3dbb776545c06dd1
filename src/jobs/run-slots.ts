import { unwatchAbort, watchAbort } from './abort-watch.js';

/**
 * Counted slots: a worker's handler slots (its concurrency), its runs in hand (a few per handler
 * slot) and, of those, its runs claimed ahead of a handler slot. A delivery takes as many slots in
 * hand and ahead as it has runs and are free (at least one, waiting in line when none is), claims
 * that many runs, and gives each slot back when its run has a handler slot (ahead) or is over (in
 * hand): runs are claimed only as far ahead as the worker will start them (River's producer fetches
 * as many jobs as it has free slots).
 */
export class RunSlots {
  private free: number;
  private count: number;
  private readonly waiting: { want: number; ahead: boolean; grant: (n: number) => void }[] = [];
  /** Called at every give or resize (watch). */
  private readonly watchers = new Set<() => void>();

  constructor(size: number) {
    this.count = checkedSize(size);
    this.free = size;
  }

  /** How many slots there are. */
  get size(): number {
    return this.count;
  }

  /**
   * Have `size` slots from now on. More: callers in line get the new ones at once. Fewer: slots in
   * use stay in use, and none is granted again until fewer than `size` are.
   */
  resize(size: number): void {
    this.free += checkedSize(size) - this.count;
    this.count = size;
    this.give(0);
  }

  /** Slots in use. */
  get busy(): number {
    return this.size - this.free;
  }

  /**
   * Take between 1 and `want` slots, as many as are free once it is this caller's turn; 0 once
   * `signal` aborts while waiting (nothing taken). `ahead`: this caller goes before those already
   * in line (a run taking back the slot it lent goes before runs that have not started).
   */
  take(want: number, signal?: AbortSignal, o: { ahead?: boolean } = {}): Promise<number> {
    if (want < 1 || signal?.aborted) return Promise.resolve(0);
    if ((this.waiting.length === 0 || o.ahead) && this.free > 0) return Promise.resolve(this.grant(want));
    return new Promise((resolve) => {
      const onAbort = () => {
        const i = this.waiting.indexOf(entry);
        if (i < 0) return;
        this.waiting.splice(i, 1);
        resolve(0);
      };
      const entry = {
        want,
        ahead: o.ahead === true,
        grant: (n: number) => {
          if (signal) unwatchAbort(signal, onAbort);
          resolve(n);
        },
      };
      // Ahead: after the others ahead, before the rest (each group in the order it came).
      const at = o.ahead ? this.waiting.findIndex((w) => !w.ahead) : -1;
      if (at >= 0) this.waiting.splice(at, 0, entry);
      else this.waiting.push(entry);
      if (signal) watchAbort(signal, onAbort);
    });
  }

  /** Give `n` slots back; the callers in line get them in turn. */
  give(n = 1): void {
    this.free += n;
    while (this.free > 0 && this.waiting.length > 0) {
      const next = this.waiting.shift()!;
      next.grant(this.grant(next.want));
    }
    if (this.watchers.size > 0) for (const w of [...this.watchers]) w();
  }

  /** Call `listener` at every give or resize until the function returned is called. */
  watch(listener: () => void): () => void {
    this.watchers.add(listener);
    return () => this.watchers.delete(listener);
  }

  private grant(want: number): number {
    const n = Math.min(want, this.free);
    this.free -= n;
    return n;
  }
}

function checkedSize(size: number): number {
  if (!Number.isInteger(size) || size < 1) throw new RangeError(`slots must be a positive integer, got ${size}`);
  return size;
}
