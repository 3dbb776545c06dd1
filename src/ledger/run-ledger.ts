/**
 * The workers' side of the ledger: claims with execution tokens, fences, ctx.transaction and
 * outcomes, one module per operation (run-claims, run-finishes, run-transactions, fences); this
 * class binds them to a pool and the deployment's tables. Every write is conditional on the attempt
 * still holding the run's newest claim, so a stale attempt can never overwrite a newer one's record.
 * Each operation takes many runs at once; src/jobs/run-ledger-batches.ts gathers concurrent calls.
 */
import type pg from 'pg';
import { DEFAULT_LEASE_TTL_MS } from './commit-stamps.js';
import { fenceRun } from './fences.js';
import { claimResults, claimStatement, recordSkippedDeliveries, type Claim, type ClaimResult } from './run-claims.js';
import { acceptedInOrder, finishStatement, type FinishRequest, type Outcome } from './run-finishes.js';
import { queryAllByKey, type KeyedExecute } from './sql-prepared.js';
import {
  commitGroup,
  inLentSlot,
  commitOne,
  recordSkippedAttempt,
  type GroupItem,
  type GroupOutcome,
  type TransactionResult,
} from './run-transactions.js';
import type { Queryable } from './transaction.js';
import { refusingShared } from './pipelined-client.js';
import { beatWorker, forgetWorker, orphanedRuns, runsClaimedBy } from './worker-liveness.js';
import {
  acquireSlot,
  releaseSlot,
  releaseEarlierStartSlots,
  slotWaiters,
  waitInLedger,
  type SlotRequest,
  type SlotResult,
  type WaitingAttempt,
} from './run-limits.js';
import { takeRateStart, type RateRequest, type RateResult } from './run-rate-limits.js';
import type { Tables } from '../db/tables.js';
import { CommitWitness } from './commit-witness.js';

export type { Claim, ClaimResult } from './run-claims.js';
export type { FinishRequest, Outcome } from './run-finishes.js';
export type { GroupItem, GroupOutcome, TransactionResult } from './run-transactions.js';
export type { SlotRequest, SlotResult, WaitingAttempt } from './run-limits.js';
export type { RateRequest, RateResult } from './run-rate-limits.js';

/** What an attempt may ask besides its outcome. */
export interface FinishDetails {
  /** The handler failed this attempt: counted against the job's retries. */
  failure?: boolean;
  /** 'retrying': not claimed again before this many ms from now. */
  retryInMs?: number;
}

export class RunLedger {
  /** A claimer whose cw_workers row beat within this is alive; see worker-liveness.ts. */
  claimerLiveWithinMs = DEFAULT_LEASE_TTL_MS;
  /** The claims this replica saw commit lately, which its heartbeat holds the ledger to. */
  readonly witness = new CommitWitness();

  constructor(
    private readonly pool: pg.Pool,
    private readonly t: Tables,
  ) {}

  /**
   * Claim a run for one attempt (see run-claims.ts). A delivery of a run that is already finished
   * is counted as a skipped attempt (a re-delivery after the work was done) and its state returned.
   */
  async claim(runId: bigint, worker: string): Promise<ClaimResult> {
    return (await this.claimMany([runId], worker))[0]!;
  }

  /** Claim many runs in one statement; one result per id, in order. */
  async claimMany(runIds: readonly bigint[], worker: string): Promise<ClaimResult[]> {
    return (await this.finishAndClaim([], { runIds, worker })).claimed;
  }

  /**
   * A worker's cycle in one round trip and one commit: record `requests`' outcomes (as finishMany),
   * then claim `claims.runIds` (as claimMany). Both commit, or neither. Claims never wait on a row
   * (SKIP LOCKED), so this waits no longer than the outcomes alone; an error fails both halves
   * (RunLedgerBatches sends them apart again when a retry could help one).
   */
  async finishAndClaim(
    requests: readonly FinishRequest[],
    claims: { runIds: readonly bigint[]; worker: string },
  ): Promise<{ accepted: boolean[]; claimed: ClaimResult[] }> {
    const { runIds, worker } = claims;
    const parts: KeyedExecute[] = [];
    if (requests.length > 0) parts.push(finishStatement(this.t, requests));
    if (runIds.length > 0)
      parts.push(claimStatement(this.t, runIds, { worker, liveWithinMs: this.claimerLiveWithinMs }));
    if (parts.length === 0) return { accepted: [], claimed: [] };
    const results = await queryAllByKey(this.pool, parts);
    const accepted = requests.length > 0 ? acceptedInOrder(requests, results[0]!) : [];
    const claimed = runIds.length > 0 ? claimResults(runIds, results.at(-1)!) : [];
    requests.forEach((r, i) => {
      if (accepted[i]) this.witness.finished(r);
    });
    for (const r of claimed) if (r.status === 'claimed') this.witness.saw(r.claim, r.claim.claimedAt);
    const finished = runIds.filter((_, i) => claimed[i]!.status === 'finished');
    await recordSkippedDeliveries(this.pool, this.t, finished, worker);
    return { accepted, claimed };
  }

  /** ctx.fence on the ledger's pool or inside the handler's transaction; see fences.ts. */
  fenceRun(resource: string, claim: Claim, db: Queryable = this.pool): Promise<void> {
    return fenceRun(db, this.t, resource, claim);
  }

  /**
   * ctx.transaction alone; see run-transactions.ts. A pipelined callback is refused, alone too, what
   * it would be refused in a group (pipelined-client.ts), so a handler never passes alone what
   * fails it beside others.
   */
  async completeInTransaction<T>(
    claim: Claim,
    fn: (tx: pg.PoolClient) => Promise<T>,
    o: { pipelined?: boolean } = {},
  ): Promise<TransactionResult<T>> {
    const result = await commitOne(this.pool, this.t, claim, o.pipelined === true ? refusingShared(fn) : fn);
    if (result.status === 'committed') this.witness.finished(claim);
    if (result.status === 'skipped')
      await this.recordSkippedAttempt(claim, 'run already completed by an earlier attempt');
    return result;
  }

  /**
   * ctx.transaction for several runs in one transaction (group commit); see run-transactions.ts.
   * A run the group rolled back comes out 'redo': run it again with completeInTransaction.
   */
  async completeGroupInTransaction(items: readonly GroupItem[]): Promise<GroupOutcome[]> {
    if (items.length === 1) {
      const [item] = items;
      try {
        const { claim, fn, pipelined } = item!;
        // Its callback in the slot it lent, as a group's (the check ahead of it runs without one).
        const inSlot = (tx: pg.PoolClient) => inLentSlot(items, () => fn(tx));
        return [{ kind: 'done', result: await this.completeInTransaction(claim as Claim, inSlot, { pipelined }) }];
      } catch (error) {
        return [{ kind: 'failed', error }];
      }
    }
    const outcomes = await commitGroup(this.pool, this.t, items);
    outcomes.forEach((o, i) => {
      if (o.kind === 'done' && o.result.status === 'committed') this.witness.finished(items[i]!.claim);
    });
    // Runs the group's check found completed already did nothing.
    const skipped = items
      .map((item, i) => ({ item, o: outcomes[i]! }))
      .filter(({ o }) => o.kind === 'done' && o.result.status === 'skipped')
      .map(({ item }) => item.claim);
    await Promise.all(skipped.map((c) => this.recordSkippedAttempt(c, 'run already completed by an earlier attempt')));
    return outcomes;
  }

  /**
   * Record an attempt's outcome. Refused (false) when a newer attempt has claimed the run since, or
   * the run is already finished: a stale attempt can never overwrite a newer attempt's record.
   * The error (a reason string or what the handler threw) is stored bounded and sanitised.
   */
  async finish(claim: Claim, outcome: Outcome, error?: unknown, details: FinishDetails = {}): Promise<boolean> {
    const [accepted] = await this.finishMany([{ ...attemptOf(claim), outcome, error, ...details }]);
    return accepted!;
  }

  /** Record many outcomes in one statement; true where accepted, in order. */
  async finishMany(requests: readonly FinishRequest[]): Promise<boolean[]> {
    return (await this.finishAndClaim(requests, { runIds: [], worker: '' })).accepted;
  }

  /** Record that this attempt found its run already completed and did nothing. */
  recordSkippedAttempt(claim: Pick<Claim, 'runId' | 'attempt'>, reason: string): Promise<void> {
    return recordSkippedAttempt(this.pool, this.t, { ...claim, token: 0n }, reason);
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

  /** This worker is alive (worker-liveness.ts). */
  beat(worker: string): Promise<void> {
    return beatWorker(this.pool, this.t, worker);
  }

  /** This worker stopped: what it still holds is handed out at once. */
  forget(worker: string): Promise<void> {
    return forgetWorker(this.pool, this.t, worker);
  }

  /** Runs whose worker stopped beating, for `worker` to claim (at most `limit`). */
  orphans(worker: string, limit: number): Promise<bigint[]> {
    return orphanedRuns(this.pool, this.t, { worker, limit, liveWithinMs: this.claimerLiveWithinMs });
  }

  /** Runs running for `worker`: at a worker's start, what an earlier start of it left running. */
  claimedBy(worker: string): Promise<bigint[]> {
    return runsClaimedBy(this.pool, this.t, worker);
  }

  /** A slot of a concurrency key for a run claimed by `worker` (run-limits.ts). */
  acquireSlot(r: SlotRequest, worker: string): Promise<SlotResult> {
    return acquireSlot(this.pool, this.t, r, { worker, liveWithinMs: this.claimerLiveWithinMs });
  }

  /** At a worker's start: its earlier start's slots whose runs ended are free (run-limits.ts); how many. */
  releaseEarlierSlots(worker: string): Promise<number> {
    return releaseEarlierStartSlots(this.pool, this.t, worker);
  }

  /** The run's handler returned: its slot is free. */
  releaseSlot(r: SlotRequest): Promise<void> {
    return releaseSlot(this.pool, this.t, r);
  }

  /** The run goes back to wait in the ledger: for a slot of a concurrency key, or until its rate limit's turn. */
  waitInLedger(
    a: WaitingAttempt,
    reason: string,
    o: { slot?: Pick<SlotRequest, 'key' | 'priority'>; until?: Date },
  ): Promise<void> {
    return waitInLedger(this.pool, this.t, a, reason, o);
  }

  /** May the run start now under its rate limit (run-rate-limits.ts)? */
  takeRateStart(r: RateRequest): Promise<RateResult> {
    return takeRateStart(this.pool, this.t, r);
  }

  /** The oldest runs waiting for a slot of `key`. */
  slotWaiters(key: string, limit: number): Promise<{ runId: bigint; attempts: number }[]> {
    return slotWaiters(this.pool, this.t, key, limit);
  }

  /** node-cron coordinator: the task of `job` at `scheduledAt` ran in-process; settle its pending run. */
  async completeUnclaimed(job: string, scheduledAt: Date): Promise<void> {
    // Its fire commit released it to the queue (a cw_hand_overs row); it ran here instead.
    await this.pool.query(
      `WITH done AS (
         UPDATE ${this.t.runs} SET state = 'completed', finished_at = now()
         WHERE job = $1 AND scheduled_at = $2 AND state = 'pending' RETURNING id)
       DELETE FROM ${this.t.handOvers} h USING done WHERE h.run_id = done.id`,
      [job, scheduledAt],
    );
  }
}

function attemptOf(claim: Claim): Pick<FinishRequest, 'runId' | 'token' | 'attempt'> {
  return { runId: claim.runId, token: claim.token, attempt: claim.attempt };
}
