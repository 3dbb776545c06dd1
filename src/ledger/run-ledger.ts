/**
 * The workers' side of the ledger: claims with execution tokens, fences, and outcomes. Every
 * write is conditional on the attempt still holding the run's newest claim, so a stale attempt
 * can never overwrite what a newer one recorded.
 */
import type pg from 'pg';
import { StaleTokenError } from '../errors.js';
import { fenceRun } from './fences.js';
import { storedError } from './stored-text.js';
import { ACTIVE_SQL } from './run-states.js';
import { withTransaction, type Queryable } from './transaction.js';
import type { Tables } from '../db/tables.js';
import type { FireTrigger } from './fire-ledger.js';

export interface Claim {
  runId: bigint;
  job: string;
  scheduledAt: Date;
  attempt: number;
  token: bigint;
  /** Why the run exists: 'catchup' for a slot fired late (reconciliation, misfire), see FireTrigger. */
  trigger: FireTrigger;
  /** When this attempt claimed the run, on the ledger's clock. */
  claimedAt: Date;
}

export type ClaimResult = { status: 'claimed'; claim: Claim } | { status: 'finished'; state: string };

export type Outcome = 'completed' | 'failed' | 'retrying' | 'cancelled' | 'superseded';

export type TransactionResult<T> = { status: 'committed'; value: T } | { status: 'skipped' };

export class RunLedger {
  constructor(
    private readonly pool: pg.Pool,
    private readonly t: Tables,
  ) {}

  /**
   * Claim a run for one attempt. The execution token comes from a sequence, so it is higher than
   * every earlier claim of any run. A run that is already finished is not claimed: the delivery is
   * counted as a skipped attempt (a re-delivery after the work was done) and its state returned.
   */
  claim(runId: bigint, worker: string): Promise<ClaimResult> {
    return withTransaction(this.pool, async (client) => {
      const res = await client.query<{
        job: string;
        scheduled_at: Date;
        attempts: number;
        claim_token: string;
        trigger: FireTrigger;
        claimed_at: Date;
      }>(
        `UPDATE ${this.t.runs} SET claim_token = nextval(${this.t.executionTokenSeq}), attempts = attempts + 1,
           state = 'running', started_at = COALESCE(started_at, now())
         WHERE id = $1 AND state IN ${ACTIVE_SQL}
         RETURNING job, scheduled_at, attempts, claim_token, trigger, clock_timestamp() AS claimed_at`,
        [runId.toString()],
      );
      const row = res.rows[0];
      if (!row) return { status: 'finished', state: await recordSkippedDelivery(client, this.t, runId, worker) };
      await client.query(
        `INSERT INTO ${this.t.runAttempts} (run_id, attempt, token, worker, state) VALUES ($1, $2, $3, $4, 'running')`,
        [runId.toString(), row.attempts, row.claim_token, worker],
      );
      return {
        status: 'claimed',
        claim: {
          runId,
          job: row.job,
          scheduledAt: row.scheduled_at,
          attempt: row.attempts,
          token: BigInt(row.claim_token),
          trigger: row.trigger,
          claimedAt: row.claimed_at,
        },
      };
    });
  }

  /** ctx.fence on the ledger's pool or inside the handler's transaction; see fences.ts. */
  fenceRun(resource: string, claim: Claim, db: Queryable = this.pool): Promise<void> {
    return fenceRun(db, this.t, resource, claim);
  }

  /**
   * ctx.transaction: the handler's writes and the run's completion commit together, or not at all.
   * Optimistic, so a paused attempt holds no lock on the run: check first (already completed →
   * 'skipped', fn not called; a newer claim → StaleTokenError), run fn, then complete the run with
   * an UPDATE conditional on this attempt still holding the newest claim. If a newer attempt
   * claimed it meanwhile, that UPDATE matches nothing and everything fn wrote is rolled back.
   */
  async completeInTransaction<T>(claim: Claim, fn: (tx: pg.PoolClient) => Promise<T>): Promise<TransactionResult<T>> {
    let skipReason: string | undefined;
    const outcome = await withTransaction(this.pool, async (client, rollback): Promise<TransactionResult<T>> => {
      const row = await this.runState(claim.runId, client);
      if (!row || row.state === 'completed') {
        await rollback();
        skipReason = 'run already completed by an earlier attempt';
        return { status: 'skipped' };
      }
      if (row.claimToken !== claim.token) throw new StaleTokenError(`run ${claim.runId}`, claim.token, row.claimToken);
      const value = await fn(client);
      if (await this.finish(claim, 'completed', undefined, client)) return { status: 'committed', value };
      await rollback();
      const now = await this.runState(claim.runId);
      if (now?.state === 'completed') {
        await this.recordSkippedAttempt(claim, 'a newer attempt completed the run first; this attempt rolled back');
      }
      throw new StaleTokenError(`run ${claim.runId}`, claim.token, now?.claimToken ?? null);
    });
    if (skipReason) await this.recordSkippedAttempt(claim, skipReason);
    return outcome;
  }

  /**
   * Record an attempt's outcome. Refused (false) when a newer attempt has claimed the run since, or
   * the run is already finished: a stale attempt can never overwrite a newer attempt's record.
   * The error (a reason string or what the handler threw) is stored bounded and sanitised.
   */
  async finish(claim: Claim, outcome: Outcome, error?: unknown, db: Queryable = this.pool): Promise<boolean> {
    const stored = error === undefined ? null : storedError(error);
    const res = await db.query(
      `UPDATE ${this.t.runs} SET state = $3,
         finished_at = CASE WHEN $3 = 'retrying' THEN NULL ELSE now() END,
         completed_attempt = CASE WHEN $3 = 'completed' THEN $4::int ELSE completed_attempt END,
         error = $5
       WHERE id = $1 AND claim_token = $2 AND state IN ${ACTIVE_SQL}`,
      [claim.runId.toString(), claim.token.toString(), outcome, claim.attempt, stored?.message ?? null],
    );
    const accepted = res.rowCount === 1;
    // Only an attempt still open takes its record: a refused late call (the shutdown's interrupt
    // after the attempt's own transaction completed the run) must not turn 'completed' into 'stale'.
    await db.query(
      `UPDATE ${this.t.runAttempts} SET state = $3, finished_at = now(), error = $4, error_stack = $5 WHERE run_id = $1 AND attempt = $2 AND state = 'running'`,
      [
        claim.runId.toString(),
        claim.attempt,
        accepted ? outcome : 'stale',
        stored?.message ?? null,
        stored?.stack ?? null,
      ],
    );
    return accepted;
  }

  /** Record that this attempt found its run already completed and did nothing. */
  async recordSkippedAttempt(claim: Claim, reason: string): Promise<void> {
    await this.pool.query(
      `UPDATE ${this.t.runAttempts} SET state = 'skipped', finished_at = now(), error = $3 WHERE run_id = $1 AND attempt = $2`,
      [claim.runId.toString(), claim.attempt, reason],
    );
    await this.pool.query(`UPDATE ${this.t.runs} SET skipped_attempts = skipped_attempts + 1 WHERE id = $1`, [
      claim.runId.toString(),
    ]);
  }

  async runState(
    runId: bigint,
    db: Queryable = this.pool,
  ): Promise<{ state: string; claimToken: bigint | null } | null> {
    const res = await db.query<{ state: string; claim_token: string | null }>(
      `SELECT state, claim_token FROM ${this.t.runs} WHERE id = $1`,
      [runId.toString()],
    );
    const row = res.rows[0];
    return row ? { state: row.state, claimToken: row.claim_token === null ? null : BigInt(row.claim_token) } : null;
  }

  /** node-cron coordinator: the task of `job` at `scheduledAt` ran in-process; settle its pending run. */
  async completeUnclaimed(job: string, scheduledAt: Date): Promise<void> {
    await this.pool.query(
      `UPDATE ${this.t.runs} SET state = 'completed', finished_at = now() WHERE job = $1 AND scheduled_at = $2 AND state = 'pending'`,
      [job, scheduledAt],
    );
  }
}

/**
 * A delivery of a run that is already finished: record it as a skipped attempt (numbered after
 * every earlier one), so the admin view and the metrics show re-deliveries. Returns the run's state.
 */
async function recordSkippedDelivery(client: pg.PoolClient, t: Tables, runId: bigint, worker: string): Promise<string> {
  const done = await client.query<{ state: string; n: number }>(
    `UPDATE ${t.runs} SET skipped_attempts = skipped_attempts + 1 WHERE id = $1
     RETURNING state, attempts + skipped_attempts AS n`,
    [runId.toString()],
  );
  const skipped = done.rows[0];
  if (!skipped) return 'unknown';
  await client.query(
    `INSERT INTO ${t.runAttempts} (run_id, attempt, token, worker, state, finished_at, error)
     VALUES ($1, $2, nextval(${t.executionTokenSeq}), $3, 'skipped', now(), $4)`,
    [runId.toString(), skipped.n, worker, `run already ${skipped.state}`],
  );
  return skipped.state;
}
