/**
 * Claims: many runs in one statement, each with its own execution token from the sequence (higher
 * than every earlier claim of any run) and its claimer, committed before any of their handlers
 * starts. The running attempt is the run's row; its attempt row is written when it ends (attempt-rows.ts).
 *
 * A run is claimable while it waits (pending, or retrying once its backoff has passed) or while it
 * is running for a worker that stopped beating (worker-liveness.ts; a claim of a version that
 * recorded no claimer counts as such, for the queue re-delivers it only after its lock expired): a killed or frozen worker's run is taken over
 * under a newer token, and the dead attempt is settled 'stale' with the reason in the same
 * statement. A run running for the claimer itself is claimable too: its worker knows whether it
 * still runs it (RunExecutor never claims a run it holds), so this is a delivery of a run whose
 * outcome it could not record (the ledger was unreachable). A run running for a live replica is left to it ('busy'), and so is a row another
 * statement holds (SKIP LOCKED: a claim never waits for, nor deadlocks with, a completion).
 */
import type { FireTrigger } from '../cron/fire-trigger.js';
import type { Tables } from '../db/tables.js';
import { ACTIVE_SQL, FINISHED_SQL } from './run-states.js';
import { UNKNOWN_WORKER, writeEndedAttempts } from './attempt-rows.js';
import { namedStatement, perSchema } from './named-statement.js';
import type pg from 'pg';
import { sqlInt, sqlIntArray, sqlText, type Queryable } from './transaction.js';
import { sqlPrepared, type KeyedExecute } from './sql-prepared.js';
import { claimerAlive } from './worker-liveness.js';

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
  /** Attempts of this run the handler failed before this one (the job's retries count these). */
  failures: number;
  /** The run's payload (runtime schedule, one-off); undefined when it has none. */
  payload?: unknown;
  /** A one-off run's caller-supplied key. */
  onceKey?: string;
  /** The replica whose dead attempt this claim took over, when the run was running. */
  tookOverFrom?: string;
  /**
   * A step run: its workflow run, step and (mapped) item, and when the step was made ready (the
   * run's row made by its needs' commit), on the ledger's clock.
   */
  workflow?: { runId: bigint; step: string; item: number | null; madeAt?: Date };
  /** Overlap 'coalesce': the later slots this run stands for (how many, the newest). */
  coalesced?: { count: number; until: Date };
}

export type ClaimResult =
  | { status: 'claimed'; claim: Claim }
  /**
   * Settled already (a re-delivery after the work was done: recorded as a skipped attempt of
   * `job`), or no such run ('unknown', no job): nothing to run.
   */
  | { status: 'finished'; state: string; job?: string }
  /** Someone else is on it (a live claimer), or its retry backoff has not passed. */
  | { status: 'busy'; state: string }
  /**
   * Claimable, but another statement held its row at that instant (the outbox marking it handed
   * over, the sweep looking at it): worth claiming again in a moment.
   */
  | { status: 'locked'; state: string }
  /** Waiting for its retry's backoff or its step's delay: claimable in `waitMs`. */
  | { status: 'early'; state: string; waitMs: number };

export interface ClaimOptions {
  /** This replica: the claimer recorded on the run and its attempt. */
  worker: string;
  /** A claimer whose cw_workers row beat within this is alive; older (or no row): dead. */
  liveWithinMs: number;
}

interface ClaimRow {
  id: string;
  status: 'claimed' | 'finished' | 'busy' | 'locked' | 'early';
  state: string;
  job: string | null;
  scheduled_at: Date | null;
  attempts: number | null;
  claim_token: string | null;
  trigger: FireTrigger | null;
  claimed_at: Date | null;
  payload: unknown;
  once_key: string | null;
  failures: number | null;
  took_over_from: string | null;
  workflow_run_id: string | null;
  step: string | null;
  item: number | null;
  made_at: Date | null;
  coalesced: number | null;
  coalesced_until: Date | null;
  wait_ms: number | null;
}

const statements = perSchema((t) => ({
  /** Claim the claimable runs among ids $1 for worker $2 (claimers alive: beat within $3 ms). */
  claim: sqlPrepared(
    'claim_runs',
    ['bigint[]', 'text', 'bigint'],
    `WITH wanted AS (
       SELECT r.id, r.state, r.claimed_by, r.claimed_at, r.attempts, r.claim_token FROM ${t.runs} r
       WHERE r.id = ANY($1::bigint[]) AND r.state IN ${ACTIVE_SQL} AND r.kind <> 'workflow'
         AND (r.available_at IS NULL OR r.available_at <= now())
         AND (r.state <> 'running' OR r.claimed_by IS NULL OR r.claimed_by = $2 OR NOT ${claimerAlive(t, '$3')})
       ORDER BY r.id
       FOR UPDATE OF r SKIP LOCKED),
     claimed AS (
       UPDATE ${t.runs} r SET claim_token = nextval(${t.executionTokenSeq}), attempts = r.attempts + 1,
         state = 'running', started_at = COALESCE(r.started_at, now()), claimed_by = $2, claimed_at = now(), available_at = NULL
       FROM wanted w WHERE r.id = w.id
       RETURNING r.id, r.job, r.scheduled_at, r.attempts, r.claim_token, r.trigger, r.payload, r.once_key,
         r.failures, r.workflow_run_id, r.step, r.item, r.coalesced, r.coalesced_until, clock_timestamp() AS claimed_at,
         CASE WHEN r.workflow_run_id IS NOT NULL THEN r.created_at END AS made_at,
         CASE WHEN w.state = 'running' THEN COALESCE(w.claimed_by, '${UNKNOWN_WORKER}') END AS took_over_from),
     dead AS (
       ${writeEndedAttempts(
         t,
         `SELECT w.id, w.attempts, w.claim_token, c.took_over_from, 'stale', COALESCE(w.claimed_at, now()),
            CASE WHEN c.took_over_from = $2 THEN 'its outcome was never recorded (its worker was started again, or lost the ledger); the run was claimed again'
              ELSE 'worker ' || c.took_over_from || ' stopped beating; the run was handed to ' || $2 END, NULL
          FROM claimed c JOIN wanted w ON w.id = c.id WHERE c.took_over_from IS NOT NULL AND w.claim_token IS NOT NULL`,
       )})
     SELECT c.id, 'claimed' AS status, 'running' AS state, c.job, c.scheduled_at, c.attempts, c.claim_token,
       c.trigger, c.claimed_at, c.payload, c.once_key, c.failures, c.took_over_from, c.workflow_run_id, c.step, c.item,
       c.made_at, c.coalesced, c.coalesced_until, NULL::int AS wait_ms
     FROM claimed c
     UNION ALL
     SELECT r.id, CASE WHEN r.state IN ${FINISHED_SQL} THEN 'finished'
         WHEN r.state IN ('pending', 'retrying') AND r.kind <> 'workflow' AND r.available_at > now() THEN 'early'
         WHEN r.state IN ('pending', 'retrying') AND r.kind <> 'workflow' THEN 'locked'
         ELSE 'busy' END, r.state,
       r.job, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL,
       ceil(extract(epoch FROM r.available_at - now()) * 1000)::int
     FROM ${t.runs} r WHERE r.id = ANY($1::bigint[]) AND r.id NOT IN (SELECT id FROM claimed)`,
  ),
  /** Record a skipped attempt for each finished run among ids $1, delivered to worker $2. */
  skippedDeliveries: namedStatement(
    'record_skipped_deliveries',
    `WITH done AS (
       UPDATE ${t.runs} SET skipped_attempts = skipped_attempts + 1
       WHERE id = ANY($1::bigint[]) AND state IN ${FINISHED_SQL}
       RETURNING id, state, attempts + skipped_attempts AS n)
     INSERT INTO ${t.runAttempts} (run_id, attempt, token, worker, state, finished_at, error)
     SELECT id, n, nextval(${t.executionTokenSeq}), $2, 'skipped', now(), 'run already ' || state FROM done`,
  ),
}));

/**
 * The claim of the claimable runs among `runIds`, to EXECUTE (alone or beside outcomes, RunLedger):
 * prepared once per connection and planned by key (sql-prepared.ts). A plan cached while cw_runs
 * was small scanned it whole at every claim until an ANALYZE (measured: 90-100 ms a claim of 50
 * runs once the table held 300,000 runs, 3-5 ms planned by key).
 */
export function claimStatement(t: Tables, runIds: readonly bigint[], o: ClaimOptions): KeyedExecute {
  return {
    s: statements(t).claim,
    args: [sqlIntArray(runIds), sqlText(o.worker), sqlInt(Math.max(0, Math.floor(o.liveWithinMs)))],
  };
}

/** What the claim statement answered, as one result per id of `runIds`, in order. */
export function claimResults(runIds: readonly bigint[], res: pg.QueryResult): ClaimResult[] {
  const byId = new Map((res.rows as ClaimRow[]).map((row) => [row.id, row]));
  return runIds.map((id): ClaimResult => {
    const row = byId.get(id.toString());
    if (!row) return { status: 'finished', state: 'unknown' };
    if (row.status === 'early') return { status: 'early', state: row.state, waitMs: Math.max(0, row.wait_ms ?? 0) };
    if (row.status === 'finished')
      return { status: 'finished', state: row.state, ...(row.job !== null && { job: row.job }) };
    if (row.status !== 'claimed') return { status: row.status, state: row.state };
    return { status: 'claimed', claim: claimOf(id, row) };
  });
}

/** A claimed row as a Claim: the optional parts assigned when present (not spread in from objects made for it). */
function claimOf(runId: bigint, row: ClaimRow): Claim {
  const claim: Claim = {
    runId,
    job: row.job!,
    scheduledAt: row.scheduled_at!,
    attempt: row.attempts!,
    token: BigInt(row.claim_token!),
    trigger: row.trigger!,
    claimedAt: row.claimed_at!,
    failures: row.failures ?? 0,
  };
  if (row.payload !== null) claim.payload = row.payload;
  if (row.once_key !== null) claim.onceKey = row.once_key;
  if (row.took_over_from !== null) claim.tookOverFrom = row.took_over_from;
  if (row.workflow_run_id !== null) {
    claim.workflow = { runId: BigInt(row.workflow_run_id), step: row.step!, item: row.item };
    if (row.made_at !== null) claim.workflow.madeAt = row.made_at;
  }
  if (row.coalesced && row.coalesced_until) claim.coalesced = { count: row.coalesced, until: row.coalesced_until };
  return claim;
}

/**
 * A delivery of a run that is already finished: record it as a skipped attempt (numbered after
 * every earlier one), so the admin view and the metrics show re-deliveries.
 */
export async function recordSkippedDeliveries(
  db: Queryable,
  t: Tables,
  runIds: readonly bigint[],
  worker: string,
): Promise<void> {
  if (runIds.length === 0) return;
  await db.query({ ...statements(t).skippedDeliveries, values: [runIds.map(String), worker] });
}
