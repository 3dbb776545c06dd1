import type { Logger } from 'pino';
import type { PoolClient } from 'pg';

/** A transaction handle for ctx.transaction / ctx.fence: a pg client inside BEGIN … COMMIT. */
export type TransactionClient = PoolClient;

/** What a handler receives for one attempt of one run. */
export interface JobContext {
  readonly jobName: string;
  /** The scheduled instant this run stands for (not "now"; a catch-up run can be late). */
  readonly scheduledAt: Date;
  /** Ledger id of the run, stable across attempts. */
  readonly runId: string;
  /** 1 for the first attempt, 2 after a retry or a re-delivery, … */
  readonly attempt: number;
  /** Execution token of this attempt: higher than every earlier claim of any run. */
  readonly fencingToken: bigint;
  /** Stable across attempts of one run: pass it to external APIs as their idempotency key. */
  readonly idempotencyKey: string;
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
   * Refuse to go on if a newer attempt has already written `resource` (throws StaleTokenError),
   * else record this attempt's token as the resource's highest. Pass `tx` to make the check part
   * of your own transaction, so the check and your write commit or roll back together.
   */
  fence(resource: string, tx?: TransactionClient): Promise<void>;
  /**
   * Run fn in one PostgreSQL transaction together with this run's completion record. Inside, first
   * checks that the run is not completed yet and that this attempt still holds the newest claim;
   * if an earlier attempt already committed, fn is not called and the attempt is recorded as
   * skipped. May be called once per attempt: a second call throws InvalidArgumentError (put all
   * of the run's writes in one transaction).
   */
  transaction<T>(fn: (tx: TransactionClient) => Promise<T>): Promise<T | undefined>;
}

export type JobHandler = (ctx: JobContext) => Promise<unknown> | unknown;
