/**
 * Gathers calls made at about the same time into one batch: what is submitted in one turn of the
 * event loop, or while the previous batches are in flight, goes out together (up to `maxBatch`), so
 * a busy worker sends one statement for many runs and an idle one waits no longer than a
 * setImmediate. No timer: batches form from load, never from waiting (graphile-worker's and
 * River's batchers wait a few ms; here the round trip in flight is the wait).
 *
 * Written by hand: the npm batchers (dataloader and kin) batch by key for reads and cache results,
 * which a write path must not do.
 */
export type ItemResult<O> = { ok: true; value: O } | { ok: false; error: unknown };

export interface MicroBatcherOptions {
  /** Most items per batch. */
  maxBatch: number;
  /** Batches in flight at once (each usually holds a connection). */
  maxInFlight: number;
}

interface Waiting<I, O> {
  item: I;
  resolve: (value: O) => void;
  reject: (error: unknown) => void;
}

export class MicroBatcher<I, O> {
  private readonly waiting: Waiting<I, O>[] = [];
  private inFlight = 0;
  private scheduled = false;

  /** `flush` answers each item of a batch in order; a rejection fails the whole batch's items. */
  constructor(
    private readonly flush: (items: I[]) => Promise<ItemResult<O>[]>,
    private readonly o: MicroBatcherOptions,
  ) {}

  submit(item: I): Promise<O> {
    return new Promise<O>((resolve, reject) => {
      this.waiting.push({ item, resolve, reject });
      this.schedule();
    });
  }

  private schedule(): void {
    if (this.scheduled || this.inFlight >= this.o.maxInFlight || this.waiting.length === 0) return;
    this.scheduled = true;
    // Let the rest of this turn's calls join the batch.
    setImmediate(() => {
      this.scheduled = false;
      this.drain();
    });
  }

  private drain(): void {
    while (this.inFlight < this.o.maxInFlight && this.waiting.length > 0) {
      const batch = this.waiting.splice(0, this.o.maxBatch);
      this.inFlight++;
      void this.send(batch).finally(() => {
        this.inFlight--;
        this.schedule();
      });
    }
  }

  private async send(batch: Waiting<I, O>[]): Promise<void> {
    let results: ItemResult<O>[];
    try {
      results = await this.flush(batch.map((w) => w.item));
    } catch (error) {
      for (const w of batch) w.reject(error);
      return;
    }
    for (const [i, w] of batch.entries()) {
      const r = results[i];
      if (!r) w.reject(new Error('batch answered fewer items than it was given'));
      else if (r.ok) w.resolve(r.value);
      else w.reject(r.error);
    }
  }
}

/**
 * Answer a batch group by group: `key` splits the items (keeping their order within a group),
 * `flushGroup` answers one group's items in order, and the answers come back in the batch's order.
 * The groups go side by side when `parallel` (each holds its own connection), else one by one.
 */
export async function flushByGroup<I, O, K>(
  items: readonly I[],
  key: (item: I) => K,
  flushGroup: (group: I[]) => Promise<O[]>,
  o: { parallel: boolean },
): Promise<O[]> {
  const groups = new Map<K, number[]>();
  for (const [i, item] of items.entries()) {
    const k = key(item);
    const same = groups.get(k);
    if (same) same.push(i);
    else groups.set(k, [i]);
  }
  const out = new Array<O>(items.length);
  const answer = async (indexes: number[]) => {
    const answers = await flushGroup(indexes.map((i) => items[i]!));
    for (const [n, i] of indexes.entries()) out[i] = answers[n]!;
  };
  if (o.parallel) await Promise.all([...groups.values()].map(answer));
  else for (const indexes of groups.values()) await answer(indexes);
  return out;
}
