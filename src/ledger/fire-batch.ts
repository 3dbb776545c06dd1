/**
 * A batch of fires as the leader and the stand-ins commit it: what is asked, what committed, the
 * JSON the insert statements read, and the first check of a runtime schedule's fire (its version
 * must still be the one in effect at its instant: schedule-ledger.ts).
 */
import type pg from 'pg';
import type { FireTrigger } from '../cron/fire-trigger.js';
import { slotOwner } from '../cron/job-names.js';
import type { Tables } from '../db/tables.js';
import { acceptScheduleFires } from './schedule-ledger.js';

export interface FireRequest {
  job: string;
  scheduledAt: Date;
  trigger: FireTrigger;
  /** 'pending' for a normal fire; 'skipped' records a fire the overlap or pause policy dropped. */
  state?: 'pending' | 'skipped';
  /** Hold delivery (overlap 'queue'): committed, but the outbox leaves it until the job is idle. */
  hold?: boolean;
  /**
   * Overlap 'replace': if this fire is inserted, the job's other active runs are cancelled in the
   * same transaction, after the fence accepted the leader's token (a stale leader cancels nothing).
   */
  replace?: boolean;
  /** Overlap 'coalesce' (a skipped fire): the job's waiting run stands for it (coalesced-fires.ts). */
  coalesce?: boolean;
  error?: string;
  /**
   * A runtime schedule's fire: the schedule and the version the leader planned it with. The commit
   * keeps it only if that version is the one in effect at the instant (schedule-ledger.ts).
   */
  schedule?: { id: string; version: number };
  /** What the handler sees as ctx.payload. */
  payload?: unknown;
}

export interface CommittedFire {
  runId: bigint;
  job: string;
  scheduledAt: Date;
  trigger: FireTrigger;
  state: 'pending' | 'skipped';
  hold: boolean;
  /** The fire's trace context (W3C traceparent), set by the scheduler when a tracer records it. */
  traceparent?: string;
  /** Not to be claimed before this (a workflow step's delay); absent or null: now. */
  availableAt?: Date | null;
}

export interface FireBatchResult {
  committed: CommittedFire[];
  /** Fires refused by the unique key (the slot's, under any handler's name): someone already committed them. */
  duplicates: number;
  /** Runs cancelled in this commit for overlap 'replace'; tell their workers only after COMMIT. */
  cancelled: bigint[];
  /** Runtime schedule fires refused because their version is no longer in effect at their instant. */
  outdated?: number;
}

/** The requests with those whose slot key is in `held` marked held (a coalesced slot that became the waiting run). */
export function withHeld(fires: FireRequest[], held: ReadonlySet<string>): FireRequest[] {
  return held.size === 0 ? fires : fires.map((f) => (held.has(slotKey(f)) ? { ...f, hold: true } : f));
}

/** A run as an insert statement returns it; whether it is held comes from its request. */
export type InsertedFire = Omit<CommittedFire, 'hold'>;

export const noFires = (): FireBatchResult => ({ committed: [], duplicates: 0, cancelled: [] });

export function slotKey(f: { job: string; scheduledAt: Date }): string {
  return `${f.job}@${f.scheduledAt.getTime()}`;
}

export function batchResult(fires: FireRequest[], rows: InsertedFire[], cancelled: bigint[]): FireBatchResult {
  const held = new Set(fires.filter((f) => f.hold).map(slotKey));
  return {
    committed: rows.map((r) => ({ ...r, hold: held.has(slotKey(r)) })),
    duplicates: fires.length - rows.length,
    cancelled,
  };
}

/** `result`, counting the runtime schedule fires refused before the insert as outdated. */
export function withOutdated(result: FireBatchResult, requested: number, accepted: number): FireBatchResult {
  return requested > accepted ? { ...result, outdated: requested - accepted } : result;
}

/**
 * The one order in which every fire commit (the leader's and each stand-in's) inserts its runs: by
 * slot (slot owner, then instant), the unique keys the inserts wait on, then job name and trigger.
 * Two stand-ins share the fence row (FOR SHARE), so nothing else serialises them; had one inserted
 * (a, T) then (b, T) while the other inserted (b, T) then (a, T), each would wait for the other's
 * uncommitted key (40P01, seen with the lease server down and every follower standing in). In one
 * order, a commit only ever waits for a key above every key it holds, so no two can wait for each
 * other. By owner, not name: "report/x" and "tick/x" at one instant are one key (one schedule).
 */
export function inLockOrder(fires: FireRequest[]): FireRequest[] {
  const keyed = fires.map((f) => ({ f, owner: slotOwner(f.job) }));
  keyed.sort(
    (a, b) =>
      compare(a.owner, b.owner) ||
      a.f.scheduledAt.getTime() - b.f.scheduledAt.getTime() ||
      compare(a.f.job, b.f.job) ||
      compare(a.f.trigger, b.f.trigger),
  );
  return keyed.map((k) => k.f);
}

/** Code-unit order, the same on every replica whatever its locale. */
const compare = (a: string, b: string): number => (a < b ? -1 : a > b ? 1 : 0);

/**
 * The fires as the JSON that jsonb_to_recordset reads in the insert statements; `ord` is each
 * fire's place, which the inserts follow (ORDER BY ord), so the caller's order is the lock order.
 */
export function fireRecords(fires: FireRequest[]): string {
  return JSON.stringify(
    fires.map((f, ord) => ({
      ord,
      job: f.job,
      scheduled_at: f.scheduledAt.toISOString(),
      trigger: f.trigger,
      state: f.state ?? 'pending',
      hold: f.hold ?? false,
      error: f.error ?? null,
      schedule_version: f.schedule?.version ?? null,
      payload: f.payload ?? null,
    })),
  );
}

/** The fires of fireRecords' JSON as a relation `fire` (the first CTE of an insert statement). */
export const FIRE_RECORDS_CTE = `fire AS (
       SELECT * FROM jsonb_to_recordset($1::jsonb) AS f(ord int, job text, scheduled_at timestamptz, trigger text,
         state text, hold boolean, error text, schedule_version int, payload jsonb))`;

/**
 * The CTEs that insert the runs of `fire` (FIRE_RECORDS_CTE) under `token` (SQL: $2, the leader's
 * own, or a stand-in's read of the fence) of replica $3, each unless its slot is taken, in the
 * fires' order, when `guard` holds: `inserted` (the runs), and `released`, a cw_hand_overs row for
 * each run handed over at once (pending, not held: released to the queue by its enqueued_at here,
 * so confirming the hand-over deletes a narrow row instead of rewriting the run; outbox.ts). The
 * leader's commit and the stand-ins' share them.
 */
export function insertFireRunsCtes(t: Tables, guard: string, token = '$2'): string {
  return `inserted AS (
       INSERT INTO ${t.runs} (job, scheduled_at, trigger, leader_token, leader_id, state, enqueued_at, finished_at, error,
         schedule_version, payload)
       SELECT f.job, f.scheduled_at, f.trigger, ${token}, $3, f.state,
              CASE WHEN f.state = 'skipped' OR NOT f.hold THEN now() END,
              CASE WHEN f.state = 'skipped' THEN now() END,
              f.error, f.schedule_version, f.payload
       FROM fire f WHERE ${guard} ORDER BY f.ord
       ON CONFLICT DO NOTHING
       RETURNING id, job, scheduled_at, trigger, state, enqueued_at),
     released AS (
       INSERT INTO ${t.handOvers} (run_id)
       SELECT id FROM inserted WHERE state = 'pending' AND enqueued_at IS NOT NULL)`;
}

/**
 * The CTE that moves each job's last scheduled fire forward to the latest of `fire`, never back
 * (manual triggers do not count), when `guard` holds; the job state rows locked by job.
 */
export function advanceJobStateCte(t: Tables, guard: string): string {
  return `job_state AS (
       INSERT INTO ${t.jobState} AS s (job, last_scheduled_at)
       SELECT job, max(scheduled_at) FROM fire WHERE trigger <> 'manual' AND ${guard}
       GROUP BY job ORDER BY job
       ON CONFLICT (job) DO UPDATE
         SET last_scheduled_at = GREATEST(s.last_scheduled_at, EXCLUDED.last_scheduled_at), updated_at = now())`;
}

/** The runs `inserted` returned as JSON (`INSERTED_JSON`), the instant as text. */
export type InsertedRow = [
  id: string,
  job: string,
  scheduledAt: string,
  trigger: FireTrigger,
  state: 'pending' | 'skipped',
];

/** The select list that returns the runs `inserted` in one JSON value (parsed by insertedFires). */
export const INSERTED_JSON = `(SELECT json_agg(json_build_array(id::text, job, scheduled_at, trigger, state)) FROM inserted)`;

/** The runs INSERTED_JSON returned (none: null). */
export function insertedFires(rows: InsertedRow[] | null): InsertedFire[] {
  return (rows ?? []).map(([id, job, scheduledAt, trigger, state]) => ({
    runId: BigInt(id),
    job,
    scheduledAt: new Date(scheduledAt),
    trigger,
    state,
  }));
}

/**
 * The requests, less runtime schedule fires whose version is no longer in effect at their instant.
 * Holds those schedules' rows FOR SHARE until COMMIT; no runtime fire, no round trip.
 */
export async function currentScheduleVersions(
  client: pg.PoolClient,
  t: Tables,
  fires: FireRequest[],
): Promise<FireRequest[]> {
  const runtime = fires.filter((f) => f.schedule);
  if (runtime.length === 0) return fires;
  const accepted = await acceptScheduleFires(
    client,
    t,
    runtime.map((f) => ({ scheduleId: f.schedule!.id, version: f.schedule!.version, scheduledAt: f.scheduledAt })),
  );
  const refused = new Set(runtime.filter((_, i) => !accepted.has(i)));
  return refused.size === 0 ? fires : fires.filter((f) => !refused.has(f));
}
