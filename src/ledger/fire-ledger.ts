/**
 * The leader's side of the ledger, as one object the scheduler is handed (and tests fake): each
 * method is one operation of its own module, on this ledger's pool and tables. Fires: fire-commit.ts
 * (the leader's, fenced) and stand-in-commit.ts; delivery: outbox.ts and delivery-sweep.ts; per-job
 * state: last-fires.ts, pauses.ts, active-runs.ts; housekeeping: removed-jobs.ts, retention.ts;
 * elections: tenures.ts; retry: run-retry.ts; fences: fences.ts.
 */
import type pg from 'pg';
import type { Tables } from '../db/tables.js';
import { activeJobs } from './active-runs.js';
import { DEFAULT_LEASE_TTL_MS, type LeaderStamp, type StandInStamp } from './commit-stamps.js';
import { deliveriesToCheck, type HandedOverRun } from './delivery-sweep.js';
import { advanceFence, fenceToken } from './fences.js';
import type { CommittedFire, FireBatchResult, FireRequest } from './fire-batch.js';
import { commitFires } from './fire-commit.js';
import type { MissedRangeRecord } from './missed-ranges.js';
import { openEras, openNewEras, type OpenEra } from './schedule-eras.js';
import { lastCommitsOf, lastFired, lastFiredOf, type LastCommit } from './last-fires.js';
import { markEnqueued, unenqueued } from './outbox.js';
import {
  expirePauses,
  listPauses,
  pausedJobs,
  pauseJob,
  setPausedFlag,
  type JobPause,
  type PauseRequest,
} from './pauses.js';
import { cancelRunsOfUndefinedJobs, forgetUndefinedJobs } from './removed-jobs.js';
import { pruneFinishedRuns } from './retention.js';
import { retryRun, type RetriedRun } from './run-retry.js';
import { commitStandInFires } from './stand-in-commit.js';
import { recordElection } from './tenures.js';
import type { Queryable } from './transaction.js';

export type { FireTrigger } from '../cron/fire-trigger.js';
export type { CommittedFire, FireBatchResult, FireRequest } from './fire-batch.js';
export type { HandedOverRun } from './delivery-sweep.js';
export type { MissedRangeRecord } from './missed-ranges.js';
export type { OpenEra } from './schedule-eras.js';
export type { LastCommit } from './last-fires.js';

export class FireLedger {
  /** How long a transaction holding the scheduler's fence may sit idle (transaction.ts, fenceHoldLimit). */
  fenceIdleLimitMs = DEFAULT_LEASE_TTL_MS;

  constructor(
    private readonly pool: pg.Pool,
    private readonly t: Tables,
  ) {}

  /** Advance `resource`'s fence to `token` unless a higher token was already accepted (equal passes). */
  advanceFence(resource: string, token: bigint, db: Queryable = this.pool): Promise<void> {
    return advanceFence(db, this.t, resource, token);
  }

  fenceToken(resource: string, db: Queryable = this.pool): Promise<bigint | null> {
    return fenceToken(db, this.t, resource);
  }

  /** The leader's commit of a batch of fires, under its fence, with its plan's missed ranges. */
  commitFires(
    requested: FireRequest[],
    leader: LeaderStamp,
    missed?: readonly MissedRangeRecord[],
  ): Promise<FireBatchResult> {
    return commitFires(this.pool, this.t, requested, leader, missed ?? [], this.fenceIdleLimitMs);
  }

  /** Every job's open schedule era (or `jobs`'), by job. */
  openEras(jobs?: readonly string[]): Promise<Map<string, OpenEra>> {
    return openEras(this.pool, this.t, jobs);
  }

  /** Open new schedule eras under the leader's fence, closing the jobs' open ones. */
  openNewEras(
    eras: readonly OpenEra[],
    leader: { fenceResource: string; token: bigint; replicaId: string },
  ): Promise<void> {
    return openNewEras(this.pool, this.t, eras, leader, this.fenceIdleLimitMs);
  }

  /** A follower's commit of overdue slots the leader did not commit. */
  commitStandInFires(requested: FireRequest[], standIn: StandInStamp): Promise<FireBatchResult> {
    return commitStandInFires(this.pool, this.t, requested, standIn, this.fenceIdleLimitMs);
  }

  /** Each job's newest scheduled fire, keyed by slotOwner(job) (a runtime schedule's under any handler). */
  lastFired(): Promise<Map<string, Date>> {
    return lastFired(this.pool, this.t);
  }

  /** As lastFired, of `jobs` only. */
  lastFiredOf(jobs: readonly string[]): Promise<Map<string, Date>> {
    return lastFiredOf(this.pool, this.t, jobs);
  }

  /** As lastFiredOf, with who committed each last slot and when (a stand-in's view of the leader). */
  lastCommitsOf(jobs: readonly string[]): Promise<Map<string, LastCommit>> {
    return lastCommitsOf(this.pool, this.t, jobs);
  }

  markEnqueued(runIds: bigint[]): Promise<void> {
    return markEnqueued(this.pool, this.t, runIds);
  }

  unenqueued(limit: number, queuedJobs: string[]): Promise<CommittedFire[]> {
    return unenqueued(this.pool, this.t, limit, queuedJobs);
  }

  deliveriesToCheck(olderThanMs: number, limit: number): Promise<HandedOverRun[]> {
    return deliveriesToCheck(this.pool, this.t, olderThanMs, limit);
  }

  activeJobs(jobs: string[]): Promise<Map<string, { ids: bigint[]; held: number }>> {
    return activeJobs(this.pool, this.t, jobs);
  }

  pausedJobs(): Promise<Set<string>> {
    return pausedJobs(this.pool, this.t);
  }

  /** Pause or resume without a reason; either clears an earlier pause's reason and expiry. */
  setPaused(job: string, paused: boolean): Promise<void> {
    return setPausedFlag(this.pool, this.t, job, paused);
  }

  /** Paused jobs with why, who and until when; an expired pause is listed until the leader lifts it. */
  pauses(): Promise<Map<string, JobPause>> {
    return listPauses(this.pool, this.t);
  }

  pause(job: string, request: PauseRequest): Promise<JobPause> {
    return pauseJob(this.pool, this.t, job, request);
  }

  /** Leader only: lift expired pauses under the scheduler's fence. */
  expirePauses(nowMs: number, fence: { resource: string; token: bigint }): Promise<JobPause[]> {
    return expirePauses(this.pool, this.t, nowMs, fence, this.fenceIdleLimitMs);
  }

  cancelRunsOfUndefinedJobs(
    defined: readonly string[],
    reason: string,
    graceMs: number,
  ): Promise<{ runId: bigint; job: string }[]> {
    return cancelRunsOfUndefinedJobs(this.pool, this.t, defined, reason, graceMs);
  }

  forgetUndefinedJobs(defined: readonly string[]): Promise<string[]> {
    return forgetUndefinedJobs(this.pool, this.t, defined);
  }

  pruneFinishedRuns(olderThanMs: number, batch: number): Promise<number> {
    return pruneFinishedRuns(this.pool, this.t, olderThanMs, batch);
  }

  /** Retry a failed or cancelled run under the leader's fence. */
  retryRun(runId: bigint, leader: LeaderStamp): Promise<RetriedRun | undefined> {
    return retryRun(this.pool, this.t, runId, leader, this.fenceIdleLimitMs);
  }

  recordElection(leaseName: string, leader: string, token: bigint, backend: string): Promise<bigint> {
    return recordElection(this.pool, this.t, leaseName, leader, token, backend);
  }
}
