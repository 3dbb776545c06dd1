/**
 * A binary min-heap of (next fire time, job): one timer serves every schedule, armed for the
 * earliest entry. Hand-written because it is 50 lines and the entries must stay tiny (100,000
 * schedules loaded is a benchmark target); no npm heap we checked is both typed and allocation-free
 * per entry beyond the entry itself.
 */
export interface FireEntry {
  /** Epoch ms of the next scheduled fire. */
  at: number;
  job: string;
  /** The last scheduled time already handled for this job (fired, skipped or missed). */
  after: number;
}

export class FireQueue<E extends { at: number } = FireEntry> {
  private heap: E[] = [];

  get size(): number {
    return this.heap.length;
  }

  peek(): E | undefined {
    return this.heap[0];
  }

  push(entry: E): void {
    const h = this.heap;
    h.push(entry);
    let i = h.length - 1;
    while (i > 0) {
      const parent = (i - 1) >> 1;
      if (h[parent]!.at <= entry.at) break;
      h[i] = h[parent]!;
      i = parent;
    }
    h[i] = entry;
  }

  pop(): E | undefined {
    const h = this.heap;
    const top = h[0];
    const last = h.pop();
    if (h.length > 0 && last) {
      let i = 0;
      for (;;) {
        const l = 2 * i + 1;
        const r = l + 1;
        let m = i;
        const atM = () => (m === i ? last.at : h[m]!.at);
        if (l < h.length && h[l]!.at < atM()) m = l;
        if (r < h.length && h[r]!.at < atM()) m = r;
        if (m === i) break;
        h[i] = h[m]!;
        i = m;
      }
      h[i] = last;
    }
    return top;
  }

  /** Remove and return the entries due at or before `now`, earliest first, at most `limit` of them. */
  popDue(now: number, limit = Infinity): E[] {
    const due: E[] = [];
    while (due.length < limit && this.heap.length > 0 && this.heap[0]!.at <= now) due.push(this.pop()!);
    return due;
  }

  /** Remove the entries of `jobs` (one pass, then re-heapify); returns each one's `after`. */
  remove(this: FireQueue<FireEntry>, jobs: ReadonlySet<string>): Map<string, number> {
    const removed = new Map<string, number>();
    const kept: FireEntry[] = [];
    for (const e of this.heap) {
      if (jobs.has(e.job)) removed.set(e.job, Math.max(e.after, removed.get(e.job) ?? -Infinity));
      else kept.push(e);
    }
    if (removed.size === 0) return removed;
    this.heap = [];
    for (const e of kept) this.push(e);
    return removed;
  }

  clear(): void {
    this.heap = [];
  }
}
