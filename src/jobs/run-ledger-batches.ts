/**
 * The workers' ledger with concurrent calls gathered into batches: the outcomes and claims asked
 * for at about the same time into one round trip (RunLedger.finishAndClaim: the outcomes, then the
 * claims, one commit), ctx.transaction callbacks into one group commit
 * (src/ledger/run-transactions.ts), unless they are slow (callback-times.ts). Each call still gets
 * its own answer: its own token, its own accepted or refused outcome, its own committed or
 * rolled-back transaction. RunExecutor sees the same interface as the plain RunLedger.
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
import { CallbackTimes, SLOW_CALLBACK_MS } from './callback-times.js';
import { MicroBatcher, flushByGroup, type ItemResult } from './micro-batcher.js';
import { isPostgresUnavailable } from '../db/postgres-unavailable.js';
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
  /** Claims and outcomes per round trip: at most twice this. Default 100. */
  maxBatch?: number;
  /** Most ctx.transaction callbacks per group commit. Default 32; 1 turns group commit off. */
  maxGroup?: number;
  /** Group commits in flight at once (each holds a connection). Default 2. */
  groupsInFlight?: number;
}

type BatchableLedger = Pick<
  RunLedger,
  | 'claimMany'
  | 'finishMany'
  | 'finishAndClaim'
  | 'completeGroupInTransaction'
  | 'completeInTransaction'
  | 'fenceRun'
  | 'runState'
>;

/** A call gathered into a cycle: a claim, or an outcome. */
type CycleItem = { kind: 'claim'; runId: bigint; worker: string } | { kind: 'finish'; request: FinishRequest };

export class RunLedgerBatches {
  private readonly cycles: MicroBatcher<CycleItem, ClaimResult | boolean>;
  private readonly clock: Clock;
  private readonly transactions: MicroBatcher<GroupItem, Exclude<GroupOutcome, { kind: 'failed' }>> | undefined;
  /** Whether a job's ctx.transaction callbacks go into group commits, from how long they take. */
  private readonly callbackTimes = new CallbackTimes();

  constructor(
    private readonly ledger: BatchableLedger,
    o: RunLedgerBatchesOptions = {},
  ) {
    this.clock = o.clock ?? systemClock;
    const maxBatch = o.maxBatch ?? 100;
    // Claims and outcomes in one batcher, not one each side by side: one round trip and one commit
    // for both (measured, run-path empty: 4.7% more runs/s, 16% less PostgreSQL CPU a run;
    // docs/benchmarks.md, "A fourteenth day").
    this.cycles = new MicroBatcher((items) => this.cycle(items), { maxBatch: 2 * maxBatch, maxInFlight: 2 });
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
    return this.cycles.submit({ kind: 'claim', runId, worker }) as Promise<ClaimResult>;
  }

  finish(claim: Claim, outcome: Outcome, error?: unknown, details: FinishDetails = {}): Promise<boolean> {
    const request = { runId: claim.runId, token: claim.token, attempt: claim.attempt, outcome, error, ...details };
    return this.cycles.submit({ kind: 'finish', request }) as Promise<boolean>;
  }

  /**
   * One batch of claims and outcomes: the outcomes and one worker's claims in one round trip.
   * Should it fail with an error a retry could not fix (an outcome's deadlock with another
   * replica's), its halves are sent apart, so each call fails only of its own.
   */
  private async cycle(items: readonly CycleItem[]): Promise<ItemResult<ClaimResult | boolean>[]> {
    const out = new Array<ItemResult<ClaimResult | boolean>>(items.length);
    const finishes: number[] = [];
    const requests: FinishRequest[] = [];
    const claimsOf = new Map<string, { at: number[]; runIds: bigint[] }>();
    for (const [i, item] of items.entries()) {
      if (item.kind === 'finish') {
        finishes.push(i);
        requests.push(item.request);
        continue;
      }
      const claims = claimsOf.get(item.worker) ?? { at: [], runIds: [] };
      claims.at.push(i);
      claims.runIds.push(item.runId);
      claimsOf.set(item.worker, claims);
    }
    const answer = (at: number[], settled: PromiseSettledResult<readonly (ClaimResult | boolean)[]>) => {
      for (const [n, i] of at.entries())
        out[i] =
          settled.status === 'fulfilled'
            ? { ok: true, value: settled.value[n]! }
            : { ok: false, error: settled.reason };
    };
    // One worker per replica: its claims go with the outcomes, another's (none in practice) alone.
    const [first, ...others] = [...claimsOf.entries()];
    const [worker, claims] = first ?? ['', { at: [], runIds: [] }];
    const { runIds } = claims;
    const together = await settle(this.ledger.finishAndClaim(requests, { runIds, worker }));
    if (together.status === 'fulfilled') {
      answer(finishes, { status: 'fulfilled', value: together.value.accepted });
      answer(claims.at, { status: 'fulfilled', value: together.value.claimed });
    } else if (requests.length > 0 && runIds.length > 0 && !isPostgresUnavailable(together.reason)) {
      answer(finishes, await settle(this.ledger.finishMany(requests)));
      answer(claims.at, await settle(this.ledger.claimMany(runIds, worker)));
    } else {
      answer(finishes, together);
      answer(claims.at, together);
    }
    for (const [other, c] of others) answer(c.at, await settle(this.ledger.claimMany(c.runIds, other)));
    return out;
  }

  /**
   * ctx.transaction in a group commit. With `loan`, the handler's slot is lent out until the
   * group's answer, and taken back before the handler goes on (see slot-loan.ts): from the call
   * while the worker's slots free quickly (the group then takes one back for its callbacks), else
   * from the moment the group's callbacks are done. A run the group rolled back is redone alone
   * here, outside the batch, once its slot is back: waiting for a slot inside a batch would hold a
   * group open on runs that cannot start.
   */
  async completeInTransaction<T>(
    claim: Claim,
    callback: (tx: pg.PoolClient) => Promise<T>,
    o: CompleteOptions = {},
  ): Promise<TransactionResult<T>> {
    const { loan } = o;
    const pipelined = o.pipelined === true;
    let tookMs = 0;
    const fn = async (tx: pg.PoolClient): Promise<T> => {
      const startedAt = this.clock.monotonic();
      try {
        return await callback(tx);
      } finally {
        tookMs = this.clock.monotonic() - startedAt;
        this.callbackTimes.observe(claim.job, tookMs);
      }
    };
    // A job whose callbacks are slow commits each alone, side by side (callback-times.ts).
    if (!this.transactions || !this.callbackTimes.groups(claim.job))
      return this.ledger.completeInTransaction(claim, fn, { pipelined });
    let lent = false;
    const takeBack = async () => {
      if (!lent) return;
      lent = false;
      await loan!.takeBack();
    };
    // A slow callback ends its group: the runs after it are redone alone rather than wait in turn.
    const item: GroupItem = { claim, fn, pipelined, goOn: () => tookMs <= SLOW_CALLBACK_MS };
    const calledAt = this.clock.monotonic();
    const lend = () => {
      lent = true;
      loan!.lend();
    };
    if (loan && loan.lendsAtCall()) {
      // Lent from the call: the runs that start meanwhile join this group (a group of 10 runs at
      // concurrency 10 became one of up to maxGroup); the callbacks run in one slot taken back,
      // one after another, or at once when pipelined (their statements then run one at a time on
      // the group's connection: to the worker, one handler's work).
      lend();
      item.slot = { takeBack, lend };
    } else if (loan)
      item.onCallbacksDone = () => {
        // A slow group does not lend: its runs would wait about as long again for a slot to free.
        if (this.clock.monotonic() - calledAt <= LEND_WITHIN_MS) lend();
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

/** The promise's outcome as a value (Promise.allSettled of one). */
async function settle<T>(p: Promise<T>): Promise<PromiseSettledResult<T>> {
  try {
    return { status: 'fulfilled', value: await p };
  } catch (reason) {
    return { status: 'rejected', reason };
  }
}
