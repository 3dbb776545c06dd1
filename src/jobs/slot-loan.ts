/**
 * A handler slot lent out while its run waits on the ledger rather than on its handler. A
 * ctx.transaction in a group commit (run-ledger-batches.ts) has run its callback; what is left is
 * the group's completion and COMMIT, a few ms in which the handler cannot run any code of its own.
 * Meanwhile the slot starts the next run, whose callback joins the next group: the two groups
 * overlap, one running callbacks while the other commits. The slot is taken back, ahead of runs
 * not started yet, before the handler goes on (or before its callback is run again), so no more
 * than `concurrency` handlers ever run code at once.
 */
export interface SlotLoan {
  /** Lend this run's slot to the next run in line. */
  lend(): void;
  /** Take a slot back before the handler's code runs again. */
  takeBack(): Promise<void>;
}
