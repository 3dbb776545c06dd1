/**
 * One attempt of one run, as a small value: its claim, its signals, and what its handler did
 * through ctx (whether ctx.transaction committed or was skipped). RunExecutor claims, builds it,
 * runs the handler through it, and settles it (settlement.ts).
 */
import type { Logger } from 'pino';
import { AbortedError, InvalidArgumentError } from '../errors.js';
import type pg from 'pg';
import type { Claim, RunLedger, TransactionResult } from '../ledger/run-ledger.js';
import { slotToken } from '../ledger/slot-token.js';
import type { JobDefinition } from './define-job.js';
import { idempotencyKey } from './idempotency-key.js';
import type { JobContext, TransactionClient, TransactionOptions } from './job-context.js';
import { ledgerCall } from './ledger-call.js';
import { unwatchAbort, watchAbort } from './abort-watch.js';
import type { SlotLoan } from './slot-loan.js';
import type { RunLog } from './run-logger.js';

/** How ctx.transaction is called: the handler's options, and the slot a group-committing ledger lends. */
export type CompleteOptions = TransactionOptions & { loan?: SlotLoan | undefined };

/** The ledger operations an attempt's context uses. */
export type AttemptLedger = Pick<RunLedger, 'fenceRun'> & {
  completeInTransaction<T>(
    claim: Claim,
    fn: (tx: pg.PoolClient) => Promise<T>,
    o?: CompleteOptions,
  ): Promise<TransactionResult<T>>;
};

/** What ctx.transaction did in this attempt. */
export type TransactionMark = 'none' | 'committed' | 'skipped';

/** How the handler ended: returned, threw, or was abandoned on shutdown while still running. */
export type HandlerOutcome = { kind: 'returned' } | { kind: 'threw'; error: unknown } | { kind: 'abandoned' };

export class Attempt {
  transaction: TransactionMark = 'none';
  /** What the handler returned (a workflow step's result when it did not use ctx.transaction). */
  returned: unknown;
  /** Stopped by a newer claim of the run or a cancel (overlap 'replace'): abortBy(). */
  private abortedByRun = false;
  /** Why the attempt was stopped (the first reason), once it is. */
  private stopped: { reason: unknown } | undefined;
  /** ctx.signal, made when the handler first reads it (most never do: an AbortSignal costs a few µs). */
  private controller: AbortController | undefined;
  private timedOut = false;
  private readonly timer: ReturnType<typeof setTimeout> | undefined;
  private readonly onShutdown = () => this.stopWith(this.shutdown?.reason);
  private transactionCalled = false;
  private abandoned = false;

  constructor(
    readonly claim: Claim,
    readonly job: JobDefinition,
    private readonly ledger: AttemptLedger,
    /** The run's logger, made on first use (runLogger). */
    readonly runLog: RunLog,
    private readonly shutdown: AbortSignal | undefined,
    /** The worker's handler slot, lent while ctx.transaction waits on its group's COMMIT. */
    private readonly loan?: SlotLoan,
  ) {
    // Linked by hand, not with AbortSignal.any: on Node 20 each AbortSignal.any call leaves an entry
    // in its sources for good, so the replica's shutdown signal, shared by every attempt, grew by
    // one per run (about 60 B a run, unbounded in a long-lived replica).
    if (shutdown) watchAbort(shutdown, this.onShutdown);
    if (job.timeoutMs > 0) {
      this.timer = setTimeout(() => {
        this.timedOut = true;
        this.stopWith(new DOMException('The operation was aborted due to timeout', 'TimeoutError'));
      }, job.timeoutMs);
      this.timer.unref(); // as AbortSignal.timeout: a timeout does not keep the process alive
    }
  }

  /** The run's logger (ctx.logger): the replica's, bound to the run's job, id, attempt and token. */
  get log(): Logger {
    return this.runLog();
  }

  /** What the handler sees as ctx.signal: abortBy, the replica's shutdown, or the job's timeout. */
  get signal(): AbortSignal {
    if (!this.controller) {
      this.controller = new AbortController();
      if (this.stopped) this.controller.abort(this.stopped.reason);
    }
    return this.controller.signal;
  }

  /** Stop the attempt: a newer claim of its run, or a cancel (overlap 'replace'). */
  abortBy(reason: unknown): void {
    this.abortedByRun = true;
    this.stopWith(reason);
  }

  private stopWith(reason: unknown): void {
    if (this.stopped) return;
    this.stopped = { reason };
    this.controller?.abort(reason);
  }

  /** The attempt is over (settled): let go of the shutdown signal and the timeout. */
  release(): void {
    if (this.shutdown) unwatchAbort(this.shutdown, this.onShutdown);
    clearTimeout(this.timer);
  }

  /** The replica's shutdown, not a newer claim, a cancel or the job's timeout, stopped it. */
  stoppedByShutdown(): boolean {
    return this.shutdown?.aborted === true && !this.abortedByRun && !this.timedOut;
  }

  /**
   * Run the handler; stop waiting for it once `abandon` aborts (its late ctx calls are then
   * refused). One promise an attempt, not a race of two: at thousands of runs a second, garbage
   * collection is about a sixth of a worker's CPU.
   */
  run(abandon: AbortSignal | undefined): Promise<HandlerOutcome> {
    return new Promise<HandlerOutcome>((resolve) => {
      const work = Promise.resolve().then(() => this.job.handler(this.context()));
      const onAbandon = () => {
        this.abandoned = true;
        work.catch((err: unknown) => this.log.warn({ err }, 'abandoned handler finished late'));
        resolve(ABANDONED);
      };
      if (abandon) watchAbort(abandon, onAbandon);
      work.then(
        (value) => {
          if (abandon) unwatchAbort(abandon, onAbandon);
          this.returned = value;
          resolve(RETURNED);
        },
        (error: unknown) => {
          if (abandon) unwatchAbort(abandon, onAbandon);
          resolve({ kind: 'threw', error });
        },
      );
    });
  }

  context(): JobContext {
    const { claim } = this;
    const attempt = this; // eslint-disable-line @typescript-eslint/no-this-alias -- the getters' `this` is ctx
    const ctx: JobContext & { coalesced?: JobContext['coalesced'] } = {
      jobName: claim.job,
      scheduledAt: claim.scheduledAt,
      isCatchUp: claim.trigger === 'catchup',
      lateByMs: Math.max(0, claim.claimedAt.getTime() - claim.scheduledAt.getTime()),
      runId: claim.runId.toString(),
      attempt: claim.attempt,
      fencingToken: claim.token,
      // Getters: most handlers read neither, and each is a few µs of formatting per run.
      get slotToken() {
        return slotToken(claim.scheduledAt, claim.attempt);
      },
      get idempotencyKey() {
        return idempotencyKey(claim);
      },
      payload: claim.payload,
      // A getter, so the AbortSignal is made only for a handler that reads it.
      get signal() {
        return attempt.signal;
      },
      // A getter: a run's child logger is made only for a handler (or outcome) that logs.
      get logger() {
        return attempt.log;
      },
      fence: async (resource, tx) => {
        this.refuseIfAbandoned();
        await ledgerCall(`ctx.fence of run ${claim.runId}`, () => this.ledger.fenceRun(resource, claim, tx));
      },
      transaction: (fn, options) => this.transact(fn, options),
    };
    // Assigned after the literal when there is one, rather than spread into it.
    if (claim.coalesced) ctx.coalesced = claim.coalesced;
    return ctx;
  }

  private async transact<T>(
    fn: (tx: TransactionClient) => Promise<T>,
    options?: TransactionOptions,
  ): Promise<T | undefined> {
    const { claim } = this;
    checkTransactionOptions(options);
    // The completion record belongs to the one transaction of the attempt: a second call would
    // find the run completed (by this very attempt) and record it as skipped.
    if (this.transactionCalled) {
      throw new InvalidArgumentError(
        `ctx.transaction may be called once per attempt (run ${claim.runId}, attempt ${claim.attempt}): put all of the run's writes in one call`,
      );
    }
    this.transactionCalled = true;
    this.refuseIfAbandoned();
    const result = await ledgerCall(`ctx.transaction of run ${claim.runId}`, () =>
      this.ledger.completeInTransaction(claim, fn, { ...options, loan: this.loan }),
    );
    if (result.status === 'skipped') {
      this.transaction = 'skipped';
      this.log.info('transaction skipped: an earlier attempt already completed this run');
      return undefined;
    }
    this.transaction = 'committed';
    return result.value;
  }

  private refuseIfAbandoned(): void {
    if (this.abandoned)
      throw new AbortedError(`attempt ${this.claim.attempt} of run ${this.claim.runId} (abandoned on shutdown)`);
  }
}

const RETURNED: HandlerOutcome = Object.freeze({ kind: 'returned' });
const ABANDONED: HandlerOutcome = Object.freeze({ kind: 'abandoned' });

/** ctx.transaction's options as a handler may pass them (from JavaScript, anything). */
function checkTransactionOptions(options: unknown): void {
  if (options === undefined) return;
  if (typeof options !== 'object' || options === null || Array.isArray(options))
    throw new InvalidArgumentError(`ctx.transaction options must be an object, got ${JSON.stringify(options)}`);
  for (const [key, value] of Object.entries(options)) {
    if (key !== 'pipelined')
      throw new InvalidArgumentError(`ctx.transaction has no option "${key}" (it takes: pipelined)`);
    if (value !== undefined && typeof value !== 'boolean')
      throw new InvalidArgumentError(
        `ctx.transaction option pipelined must be true or false, got ${JSON.stringify(value)}`,
      );
  }
}
