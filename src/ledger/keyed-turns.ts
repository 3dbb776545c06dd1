/**
 * Calls that take turns per key: a call runs once every earlier call of its key has settled. The
 * workflow ledger keeps each replica to one transaction at a time on a workflow run's lock with it
 * (workflow-ledger.ts says why). Written here rather than taken from a library: it is a promise
 * chain per key, dropped once the key is idle.
 */
export class KeyedTurns {
  /** Per key, the promise that settles when the last call queued for it has settled. */
  private readonly tails = new Map<string, Promise<void>>();

  async run<T>(key: string, fn: () => Promise<T>): Promise<T> {
    const before = this.tails.get(key);
    let settled!: () => void;
    const mine = new Promise<void>((resolve) => (settled = resolve));
    const tail = before ? before.then(() => mine) : mine;
    this.tails.set(key, tail);
    try {
      if (before) await before;
      return await fn();
    } finally {
      settled();
      if (this.tails.get(key) === tail) this.tails.delete(key);
    }
  }

  /** Keys with a call running or waiting. */
  get busyKeys(): number {
    return this.tails.size;
  }
}
