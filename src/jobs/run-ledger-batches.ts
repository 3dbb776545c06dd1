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
  Outcome,
  RunLedger,
  TransactionResult,
} from '../ledger/run-ledger.js';
import type { Queryable } from '../ledger/transaction.js';
import { MicroBatcher, flushByGroup } from './micro-batcher.js';

export interface RunLedgerBatchesOptions {
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
  private readonly transactions: MicroBatcher<GroupItem, TransactionResult<unknown>> | undefined;

  constructor(
    private readonly ledger: BatchableLedger,
    o: RunLedgerBatchesOptions = {},
  ) {
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
              (await this.ledger.completeGroupInTransaction(items)).map((o) =>
                o.ok ? { ok: true, value: o.result } : { ok: false, error: o.error },
              ),
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

  completeInTransaction<T>(claim: Claim, fn: (tx: pg.PoolClient) => Promise<T>): Promise<TransactionResult<T>> {
    if (!this.transactions) return this.ledger.completeInTransaction(claim, fn);
    return this.transactions.submit({ claim, fn }) as Promise<TransactionResult<T>>;
  }

  fenceRun(resource: string, claim: Claim, db?: Queryable): Promise<void> {
    return this.ledger.fenceRun(resource, claim, db);
  }

  runState(runId: bigint): Promise<{ state: string; claimToken: bigint | null } | null> {
    return this.ledger.runState(runId);
  }
}
