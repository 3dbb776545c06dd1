/**
 * A worker lends from the call while, with every slot busy, one comes free within this long on
 * average (the mean time a handler holds its slot over the slots): a group's callbacks and a run
 * taking its slot back wait about that.
 */
export const LEND_AT_CALL_WITHIN_MS = 5;

/**
 * A handler slot lent out while its run waits on the ledger rather than on its handler. A
 * ctx.transaction in a group commit (run-ledger-batches.ts) waits for its group, then for the
 * group's completion and COMMIT: a few ms in which the handler cannot run any code of its own.
 * Meanwhile the slot starts the next run, whose callback joins a group too: groups grow and
 * overlap, one running callbacks while the other commits. A slot is taken back, ahead of runs not
 * started yet, before the handler goes on, before its callback is run again alone, and (one for the
 * group, whose callbacks run one after another) before a group's callbacks, so no more than
 * `concurrency` handlers ever run code at once. A pipelined group's callbacks run at once in that
 * one slot: they only send statements, which run one at a time on the group's connection.
 */
export interface SlotLoan {
  /**
   * Lend from the ctx.transaction call rather than once the group's callbacks are done: while the
   * worker's slots free quickly, so that the group's callbacks, which run in a slot taken back
   * before the first of them (ahead of runs not started yet), wait little for one. The runs that
   * start meanwhile join the same group: larger groups, fewer commits a run.
   */
  lendsAtCall(): boolean;
  /** Lend this run's slot to the next run in line. */
  lend(): void;
  /** Take a slot back before the handler's code runs again. */
  takeBack(): Promise<void>;
}
