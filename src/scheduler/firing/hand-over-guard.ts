/**
 * Keeps the outbox sweep off the runs the fire path is handing to the queue (no work done twice).
 * A sweep reads "committed, not yet marked enqueued"; that read can see a run
 * - whose commit is through but whose committer has not resumed yet (the commit's answer and the
 *   sweep's rows arrive in either order), or
 * - whose hand-over finished (marked enqueued) after the sweep's snapshot was taken.
 * So a sweep waits for the commits in flight before it filters, and a handed-over run stays
 * excluded until a sweep that began after its hand-over ended has started.
 */
export class HandOverGuard {
  /** Commits in flight: their runs become `inHand` before the commit counts as settled. */
  private readonly commits = new Set<Promise<unknown>>();
  private readonly inHand = new Set<bigint>();
  /** Runs handed over, with the number of sweeps begun when their hand-over ended. */
  private readonly done = new Map<bigint, number>();
  private sweepsBegun = 0;
  /** Sweeps in progress, by the number each was given. */
  private readonly sweeping = new Set<number>();

  /** Track a commit; `handedOver(result)` names the runs its committer will hand to the queue. */
  committing<T>(commit: Promise<T>, handedOver: (result: T) => bigint[]): Promise<T> {
    const tracked = commit.then((result) => {
      for (const id of handedOver(result)) this.inHand.add(id);
      return result;
    });
    const forget = (): void => void this.commits.delete(settled);
    const settled: Promise<void> = tracked.then(forget, forget);
    this.commits.add(settled);
    return tracked;
  }

  /** The hand-over of these runs ended (enqueued and marked, or failed: the outbox's then). */
  ended(runIds: bigint[], delivered: boolean): void {
    for (const id of runIds) {
      this.inHand.delete(id);
      if (delivered) this.done.set(id, this.sweepsBegun);
    }
  }

  /** Run one sweep's read, then leave out the runs the fire path has or had in hand. */
  async sweep<T extends { runId: bigint }>(read: () => Promise<T[]>): Promise<T[]> {
    const me = ++this.sweepsBegun;
    this.sweeping.add(me);
    try {
      this.forgetSettled();
      const rows = await read();
      await Promise.all([...this.commits]);
      return rows.filter((r) => !this.inHand.has(r.runId) && !this.done.has(r.runId));
    } finally {
      this.sweeping.delete(me);
    }
  }

  /** Runs whose hand-over ended before every sweep in progress began: no such sweep can see them. */
  private forgetSettled(): void {
    const oldest = Math.min(...this.sweeping);
    for (const [id, stamp] of this.done) if (stamp < oldest) this.done.delete(id);
  }
}
