import type { Logger } from 'pino';
import type { PoolClient } from 'pg';

/** A transaction handle for ctx.transaction / ctx.fence: a pg client inside BEGIN … COMMIT. */
export type TransactionClient = PoolClient;

/** What a handler receives for one attempt of one run. */
export interface JobContext {
  readonly jobName: string;
  /** The scheduled instant this run stands for (not "now"; a catch-up run can be late). */
  readonly scheduledAt: Date;
  /**
   * True when this run is a catch-up: a slot fired late, after an election or by the misfire
   * policy (run trigger 'catchup'), not at its time. Capped per job by maxCatchUp.
   */
  readonly isCatchUp: boolean;
  /** How late this attempt started: its claim time minus scheduledAt, on the ledger's clock (>= 0). */
  readonly lateByMs: number;
  /** Ledger id of the run, stable across attempts. */
  readonly runId: string;
  /** 1 for the first attempt, 2 after a retry or a re-delivery, … */
  readonly attempt: number;
  /**
   * Execution token of this attempt: higher than every earlier claim of any run. It orders CLAIMS,
   * not slots: after a failover the catch-up runs of one job are claimed in any order, so do not
   * use it to decide which run of a resource is newest (use slotToken).
   */
  readonly fencingToken: bigint;
  /**
   * Orders the runs of a resource by scheduled instant, then attempts of one run by attempt number
   * (scheduled epoch ms × 1,000,000 + attempt). What ctx.fence stores; hand it to a guard in your
   * own store ("write only if my slotToken is higher than the stored one") and throw
   * SupersededError when the guard refuses: the run then settles 'superseded', not failed.
   */
  readonly slotToken: bigint;
  /** Stable across attempts of one run: pass it to external APIs as their idempotency key. */
  readonly idempotencyKey: string;
  /**
   * The JSON the run was fired with: a runtime schedule's payload (of the version that fired it),
   * or a one-off run's. Undefined for a job from code fired on its schedule.
   */
  readonly payload?: unknown;
  /**
   * Overlap 'coalesce': this run also stands for `count` later slots that came while it waited,
   * the newest at `until` (they are recorded skipped, naming this run). Undefined when none.
   */
  readonly coalesced?: { readonly count: number; readonly until: Date };
  /**
   * Aborted on shutdown (after the grace period), timeout, or when a newer attempt claims the run.
   * An attempt that stops because of the shutdown is recorded as interrupted, not failed, and the
   * run is handed to another replica without using up one of the job's retries. A handler that
   * ignores the signal is abandoned shortly after; its later ctx.transaction / ctx.fence calls are
   * refused.
   */
  readonly signal: AbortSignal;
  readonly logger: Logger;
  /**
   * Guard a write to `resource` so the newest slot wins. Throws StaleTokenError if a newer attempt
   * of this run has claimed it (this attempt is stale; the newer one does the work), and
   * SupersededError if a run of a LATER scheduled instant already wrote `resource` (this run is
   * late, e.g. a catch-up after a failover: it settles 'superseded', without its effect, and is
   * not retried). Otherwise records this attempt's slotToken as the resource's highest. Pass `tx`
   * to make the check part of your own transaction, so the check and your write commit or roll
   * back together.
   */
  fence(resource: string, tx?: TransactionClient): Promise<void>;
  /**
   * Run fn in one PostgreSQL transaction together with this run's completion record. Inside, first
   * checks that the run is not completed yet and that this attempt still holds the newest claim;
   * if an earlier attempt already committed, fn is not called and the attempt is recorded as
   * skipped. May be called once per attempt: a second call throws InvalidArgumentError (put all
   * of the run's writes in one transaction).
   */
  transaction<T>(fn: (tx: TransactionClient) => Promise<T>, options?: TransactionOptions): Promise<T | undefined>;
}

/** How ctx.transaction may share its database transaction with other runs' (group commit). */
export interface TransactionOptions {
  /**
   * fn is independent of other runs' callbacks: it does not read what they write, lock rows to wait
   * for them, or use savepoints or settings. Then the callbacks of a group commit run at once and
   * their statements are pipelined on one connection instead of sent one answer after another.
   * The group's callbacks take one handler slot between them, so fn should do nothing but send
   * statements on tx (other calls it made would be made by the whole group at once).
   * A statement that needs the transaction to itself (FOR UPDATE / SHARE, LOCK, advisory locks,
   * SAVEPOINT, SET, a cursor) is refused with PipelinedStatementError, nothing of the run
   * committed. Default false. Ignored in a workflow step.
   */
  readonly pipelined?: boolean;
}

/** A job's code: may return a promise, which is awaited; what it resolves to is not used. */
export type JobHandler = (ctx: JobContext) => unknown;
