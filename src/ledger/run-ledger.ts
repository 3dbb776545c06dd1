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
import { sqlInt, withTransaction, type Queryable } from './transaction.js';
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
  /** The run's payload (runtime schedule, one-off); undefined when it has none. */
  payload?: unknown;
  /** A one-off run's caller-supplied key. */
  onceKey?: string;
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
  async claim(runId: bigint, worker: string): Promise<ClaimResult> {
    // One statement, so one round trip and atomic without BEGIN / COMMIT: the run's new token and
    // its attempt row are written together or not at all.
    const res = await this.pool.query<{
      job: string;
      scheduled_at: Date;
      attempts: number;
      claim_token: string;
      trigger: FireTrigger;
      claimed_at: Date;
      payload: unknown;
      once_key: string | null;
    }>(
      `WITH claimed AS (
         UPDATE ${this.t.runs} SET claim_token = nextval(${this.t.executionTokenSeq}), attempts = attempts + 1,
           state = 'running', started_at = COALESCE(started_at, now())
         WHERE id = $1 AND state IN ${ACTIVE_SQL}
         RETURNING id, job, scheduled_at, attempts, claim_token, trigger, clock_timestamp() AS claimed_at,
           payload, once_key),
       attempt AS (
         INSERT INTO ${this.t.runAttempts} (run_id, attempt, token, worker, state)
         SELECT id, attempts, claim_token, $2, 'running' FROM claimed)
       SELECT job, scheduled_at, attempts, claim_token, trigger, claimed_at, payload, once_key FROM claimed`,
      [runId.toString(), worker],
    );
    const row = res.rows[0];
    if (!row) {
      const state = await withTransaction(this.pool, (client) => recordSkippedDelivery(client, this.t, runId, worker));
      return { status: 'finished', state };
    }
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
        ...(row.payload === null ? {} : { payload: row.payload }),
        ...(row.once_key === null ? {} : { onceKey: row.once_key }),
      },
    };
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
    const check = `SELECT state, claim_token FROM ${this.t.runs} WHERE id = ${sqlInt(claim.runId)}`;
    const outcome = await withTransaction(
      this.pool,
      async (client, rollback, { opened, commitWith }): Promise<TransactionResult<T>> => {
        const row = runStateOf(opened);
        if (!row || row.state === 'completed') {
          await rollback();
          skipReason = 'run already completed by an earlier attempt';
          return { status: 'skipped' };
        }
        if (row.claimToken !== claim.token)
          throw new StaleTokenError(`run ${claim.runId}`, claim.token, row.claimToken);
        const value = await fn(client);
        if (await this.completeAndCommit(claim, commitWith)) return { status: 'committed', value };
        await rollback();
        const now = await this.runState(claim.runId);
        if (now?.state === 'completed') {
          await this.recordSkippedAttempt(claim, 'a newer attempt completed the run first; this attempt rolled back');
        }
        throw new StaleTokenError(`run ${claim.runId}`, claim.token, now?.claimToken ?? null);
      },
      check, // BEGIN and the check in one round trip
    );
    if (skipReason) await this.recordSkippedAttempt(claim, skipReason);
    return outcome;
  }

  /**
   * The completion and COMMIT in one round trip. The completion is conditional on this attempt
   * holding the newest claim; when it matches nothing the statement raises (REFUSED_COMPLETION),
   * which aborts the transaction so COMMIT cannot commit the handler's writes. False then.
   */
  private async completeAndCommit(claim: Claim, commitWith: (sql: string) => Promise<unknown>): Promise<boolean> {
    const refuse = `(${sqlText(REFUSED_COMPLETION)} || (SELECT count(*) FROM run))::int`;
    const sql = finishStatement(this.t, {
      runId: sqlInt(claim.runId),
      token: sqlInt(claim.token),
      outcome: "'completed'",
      attempt: sqlInt(claim.attempt),
      message: 'NULL',
      stack: 'NULL',
      result: `CASE WHEN EXISTS (SELECT 1 FROM run) THEN true ELSE ${refuse} > 0 END`,
    });
    try {
      await commitWith(sql);
      return true;
    } catch (err) {
      if (err instanceof Error && err.message.includes(REFUSED_COMPLETION)) return false;
      throw err;
    }
  }

  /**
   * Record an attempt's outcome. Refused (false) when a newer attempt has claimed the run since, or
   * the run is already finished: a stale attempt can never overwrite a newer attempt's record.
   * The error (a reason string or what the handler threw) is stored bounded and sanitised.
   */
  async finish(claim: Claim, outcome: Outcome, error?: unknown, db: Queryable = this.pool): Promise<boolean> {
    const stored = error === undefined ? null : storedError(error);
    const res = await db.query<{ accepted: boolean }>(
      finishStatement(this.t, {
        runId: '$1',
        token: '$2',
        outcome: '$3',
        attempt: '$4',
        message: '$5',
        stack: '$6',
        result: 'EXISTS (SELECT 1 FROM run)',
      }),
      [
        claim.runId.toString(),
        claim.token.toString(),
        outcome,
        claim.attempt,
        stored?.message ?? null,
        stored?.stack ?? null,
      ],
    );
    return res.rows[0]?.accepted === true;
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

/** What the refused in-transaction completion raises: a cast error naming itself. */
const REFUSED_COMPLETION = 'cronwarden: completion refused, a newer attempt holds the run ';

/** A string as an SQL literal (only ever our own constants). */
function sqlText(s: string): string {
  return `'${s.replaceAll("'", "''")}'`;
}

/**
 * Record an attempt's outcome on the run (only while it holds the newest claim and the run is
 * active) and on its attempt row (only while that is still open: a refused late call, such as the
 * shutdown's interrupt after the attempt's own transaction completed the run, must not turn
 * 'completed' into 'stale'), in one statement. The arguments are SQL: placeholders or literals.
 */
function finishStatement(
  t: Tables,
  a: { runId: string; token: string; outcome: string; attempt: string; message: string; stack: string; result: string },
): string {
  return `WITH run AS (
      UPDATE ${t.runs} SET state = ${a.outcome},
        finished_at = CASE WHEN ${a.outcome} = 'retrying' THEN NULL ELSE now() END,
        completed_attempt = CASE WHEN ${a.outcome} = 'completed' THEN ${a.attempt}::int ELSE completed_attempt END,
        error = ${a.message}
      WHERE id = ${a.runId} AND claim_token = ${a.token} AND state IN ${ACTIVE_SQL}
      RETURNING id),
    attempt AS (
      UPDATE ${t.runAttempts}
      SET state = CASE WHEN EXISTS (SELECT 1 FROM run) THEN ${a.outcome} ELSE 'stale' END,
        finished_at = now(), error = ${a.message}, error_stack = ${a.stack}
      WHERE run_id = ${a.runId} AND attempt = ${a.attempt} AND state = 'running')
    SELECT ${a.result} AS accepted`;
}

function runStateOf(res: pg.QueryResult | undefined): { state: string; claimToken: bigint | null } | null {
  const row = res?.rows[0] as { state: string; claim_token: string | null } | undefined;
  return row ? { state: row.state, claimToken: row.claim_token === null ? null : BigInt(row.claim_token) } : null;
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
