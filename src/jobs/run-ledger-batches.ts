/**
 * The workers' ledger with concurrent calls gathered into batches: claims into one claim statement,
 * outcomes into one finish statement, ctx.transaction callbacks into one group commit
 * (src/ledger/run-transactions.ts). Each call still gets its own answer: its own token, its own
 * accepted or refused outcome, its own committed or rolled-back transaction. RunExecutor sees the
 * same interface as the plain RunLedger.
 */
import type pg from 'pg';
import type {
  Claim,
  ClaimResult,
  FinishDetails,
  FinishRequest,
  GroupItem,
  GroupOutcome,
  Outcome,
  RunLedger,
  TransactionResult,
} from '../ledger/run-ledger.js';
import type { Queryable } from '../ledger/transaction.js';
import { MicroBatcher, flushByGroup } from './micro-batcher.js';
import type { CompleteOptions } from './attempt.js';
import { systemClock, type Clock } from '../clock.js';

/**
 * A run whose group commit had its callbacks done within this long of its ctx.transaction call
 * lends its handler slot while the group commits (slot-loan.ts). Taking the slot back waits for
 * the run that borrowed it to finish or lend in turn, about as long as one group's callbacks: worth
 * a few ms for a COMMIT of a few ms, not a second. (Measured, run-path write: callbacks 2-3 ms,
 * completion and COMMIT 2-3 ms.)
 */
export const LEND_WITHIN_MS = 20;

export interface RunLedgerBatchesOptions {
  /** For the lending rule's time (LEND_WITHIN_MS). */
  clock?: Clock;
  /** Most runs per claim or finish statement. Default 100. */
  maxBatch?: number;
  /** Most ctx.transaction callbacks per group commit. Default 32; 1 turns group commit off. */
  maxGroup?: number;
  /** Group commits in flight at once (each holds a connection). Default 2. */
  groupsInFlight?: number;
}

type BatchableLedger = Pick<
  RunLedger,
  'claimMany' | 'finishMany' | 'completeGroupInTransaction' | 'completeInTransaction' | 'fenceRun' | 'runState'
>;

export class RunLedgerBatches {
  private readonly claims: MicroBatcher<{ runId: bigint; worker: string }, ClaimResult>;
  private readonly finishes: MicroBatcher<FinishRequest, boolean>;
  private readonly clock: Clock;
  private readonly transactions: MicroBatcher<GroupItem, Exclude<GroupOutcome, { kind: 'failed' }>> | undefined;

  constructor(
    private readonly ledger: BatchableLedger,
    o: RunLedgerBatchesOptions = {},
  ) {
    this.clock = o.clock ?? systemClock;
    const maxBatch = o.maxBatch ?? 100;
    this.claims = new MicroBatcher(
      async (items) => {
        // One worker per replica, so one claimer per batch; a mix is split by worker.
        const results = await flushByGroup(
          items,
          (item) => item.worker,
          (group) =>
            this.ledger.claimMany(
              group.map((item) => item.runId),
              group[0]!.worker,
            ),
          { parallel: false },
        );
        return results.map((value) => ({ ok: true, value }));
      },
      { maxBatch, maxInFlight: 2 },
    );
    this.finishes = new MicroBatcher(
      async (items) => (await this.ledger.finishMany(items)).map((value) => ({ ok: true, value })),
      { maxBatch, maxInFlight: 2 },
    );
    const maxGroup = o.maxGroup ?? 32;
    this.transactions =
      maxGroup > 1
        ? new MicroBatcher(
            async (items) =>
              // Pipelined callbacks and the others in groups of their own, side by side.
              (
                await flushByGroup(
                  items,
                  (item) => item.pipelined === true,
                  (group) => this.ledger.completeGroupInTransaction(group),
                  { parallel: true },
                )
              ).map((o) => (o.kind === 'failed' ? { ok: false, error: o.error } : { ok: true, value: o })),
            { maxBatch: maxGroup, maxInFlight: o.groupsInFlight ?? 2 },
          )
        : undefined;
  }

  claim(runId: bigint, worker: string): Promise<ClaimResult> {
    return this.claims.submit({ runId, worker });
  }

  finish(claim: Claim, outcome: Outcome, error?: unknown, details: FinishDetails = {}): Promise<boolean> {
    return this.finishes.submit({
      runId: claim.runId,
      token: claim.token,
      attempt: claim.attempt,
      outcome,
      error,
      ...details,
    });
  }

  /**
   * ctx.transaction in a group commit. With `loan`, the handler's slot is lent out from the moment
   * the group's callbacks are done until its answer, and taken back before the handler goes on (see
   * slot-loan.ts). A run the group rolled back is redone alone here, outside the batch, once its
   * slot is back: waiting for a slot inside a batch would hold a group open on runs that cannot start.
   */
  async completeInTransaction<T>(
    claim: Claim,
    fn: (tx: pg.PoolClient) => Promise<T>,
    o: CompleteOptions = {},
  ): Promise<TransactionResult<T>> {
    const { loan } = o;
    const pipelined = o.pipelined === true;
    if (!this.transactions) return this.ledger.completeInTransaction(claim, fn, { pipelined });
    let lent = false;
    const takeBack = async () => {
      if (!lent) return;
      lent = false;
      await loan!.takeBack();
    };
    const item: GroupItem = { claim, fn, pipelined };
    const calledAt = this.clock.monotonic();
    if (loan)
      item.onCallbacksDone = () => {
        // A slow group does not lend: its runs would wait about as long again for a slot to free.
        if (this.clock.monotonic() - calledAt > LEND_WITHIN_MS) return;
        lent = true;
        loan.lend();
      };
    let outcome: GroupOutcome;
    try {
      outcome = await this.transactions.submit(item);
    } finally {
      await takeBack();
    }
    if (outcome.kind === 'redo') return this.ledger.completeInTransaction(claim, fn, { pipelined });
    return outcome.result as TransactionResult<T>;
  }

  fenceRun(resource: string, claim: Claim, db?: Queryable): Promise<void> {
    return this.ledger.fenceRun(resource, claim, db);
  }

  runState(runId: bigint): Promise<{ state: string; claimToken: bigint | null } | null> {
    return this.ledger.runState(runId);
  }
}
