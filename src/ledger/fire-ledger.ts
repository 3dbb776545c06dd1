/**
 * The leader's side of the ledger: fires committed under the scheduler's fence with the unique
 * (job, scheduled_at) key, the outbox, per-job state (last fire, paused), elections and retention.
 * Hand-written SQL over the drizzle schema (src/db/schema.ts), because each statement is a
 * conditional upsert whose exact WHERE clause is the point (graphile-worker style: "only the
 * writer that advances the row goes on").
 */
import type pg from 'pg';
import { advanceFence, fenceToken } from './fences.js';
import { StaleTokenError } from '../errors.js';
import { ACTIVE_SQL, FINISHED_SQL } from './run-states.js';
import { retryRun, type RetriedRun } from './run-retry.js';
import { storedError } from './stored-text.js';
import { expirePauses, listPauses, pauseJob, setPausedFlag, type JobPause, type PauseRequest } from './pauses.js';
import { sqlInt, withTransaction, type Queryable } from './transaction.js';
import { acceptScheduleFires } from './schedule-ledger.js';
import type { Tables } from '../db/tables.js';
import type { LeaderStamp, StandInStamp } from './commit-stamps.js';
import type { FireTrigger } from '../cron/fire-trigger.js';

export type { FireTrigger } from '../cron/fire-trigger.js';

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
}

export interface FireBatchResult {
  committed: CommittedFire[];
  /** Fires refused by the unique (job, scheduled_at) key: someone already committed them. */
  duplicates: number;
  /** Runs cancelled in this commit for overlap 'replace'; tell their workers only after COMMIT. */
  cancelled: bigint[];
  /** Runtime schedule fires refused because their version is no longer in effect at their instant. */
  outdated?: number;
}

/** A run the leader handed to the queue, as the re-delivery sweep sees it. */
export interface HandedOverRun {
  runId: bigint;
  job: string;
  scheduledAt: Date;
  state: string;
  /** Execution token of the newest claim; null if no worker ever claimed it. */
  claimToken: bigint | null;
}

/** Who commits a batch of fires: the token and replica recorded on each run. */
interface CommitStamp {
  token: bigint;
  replicaId: string;
}

export class FireLedger {
  constructor(
    private readonly pool: pg.Pool,
    private readonly t: Tables,
  ) {}

  /**
   * Advance `resource`'s fence to `token` unless a higher token was already accepted.
   * Equal tokens pass: one holder writes many times under one token.
   */
  advanceFence(resource: string, token: bigint, db: Queryable = this.pool): Promise<void> {
    return advanceFence(db, this.t, resource, token);
  }

  fenceToken(resource: string, db: Queryable = this.pool): Promise<bigint | null> {
    return fenceToken(db, this.t, resource);
  }

  /**
   * Commit a batch of fires in one transaction: advance the leader's fence (a stale leader is
   * refused here, not by luck), then insert each run with the unique (job, scheduled_at) key.
   * For each inserted fire marked `replace`, the job's other active runs are cancelled in the same
   * transaction (so only a leader the fence accepted can cancel, and only with a fire that is
   * really new); their ids are returned in `cancelled`.
   * `stillLeading` is checked after the writes and just before COMMIT: past the local deadline
   * we roll back instead of committing (and nothing is cancelled).
   */
  async commitFires(requested: FireRequest[], leader: LeaderStamp): Promise<FireBatchResult> {
    const nothing: FireBatchResult = { committed: [], duplicates: 0, cancelled: [] };
    if (requested.length === 0) return nothing;
    return withTransaction(this.pool, async (client, rollback) => {
      // Runtime schedule fires are checked against the version in effect first (none: no round trip).
      const fires = await this.currentScheduleVersions(client, requested);
      const rows = await fenceAndInsert(client, this.t, fires, leader);
      const cancelled = await this.cancelReplaced(client, fires, rows);
      if (!leader.stillLeading()) {
        await rollback();
        return nothing;
      }
      const result = batchResult(fires, rows, cancelled);
      return requested.length > fires.length ? { ...result, outdated: requested.length - fires.length } : result;
    });
  }

  /** The requests, less runtime schedule fires whose version is no longer in effect at their instant. */
  private async currentScheduleVersions(client: pg.PoolClient, fires: FireRequest[]): Promise<FireRequest[]> {
    const runtime = fires.filter((f) => f.schedule);
    if (runtime.length === 0) return fires;
    const accepted = await acceptScheduleFires(
      client,
      this.t,
      runtime.map((f) => ({ scheduleId: f.schedule!.id, version: f.schedule!.version, scheduledAt: f.scheduledAt })),
    );
    const refused = new Set(runtime.filter((_, i) => !accepted.has(i)));
    return refused.size === 0 ? fires : fires.filter((f) => !refused.has(f));
  }

  /**
   * A follower's commit of overdue slots the leader did not commit (stand-in.ts). No lease, so no
   * fence to advance: the fires carry the scheduler fence's current token, read under a share lock
   * on the fence row, so a leader's fenced commit and this one are serialised and the tokens on
   * committed runs never decrease in commit order (I3). The unique (job, scheduled_at) key keeps
   * each slot once however many followers and leaders race for it (I1). Before any leader has ever
   * raised the fence there is no one to stand in for: nothing is committed. Overlap 'replace' fires
   * are never accepted here: cancelling other runs needs the leader's fence. Runtime schedule fires
   * are re-checked against the version in effect first, as in commitFires (and in its lock order:
   * the schedules' rows, then the fence row).
   */
  async commitStandInFires(requested: FireRequest[], standIn: StandInStamp): Promise<FireBatchResult> {
    const nothing: FireBatchResult = { committed: [], duplicates: 0, cancelled: [] };
    const candidates = requested.filter((f) => !f.replace);
    if (candidates.length === 0) return nothing;
    return withTransaction(this.pool, async (client) => {
      const accepted = await this.currentScheduleVersions(client, candidates);
      if (accepted.length === 0) return { ...nothing, outdated: candidates.length };
      const fence = await client.query<{ token: string }>(
        `SELECT token FROM ${this.t.fences} WHERE resource = $1 FOR SHARE`,
        [standIn.fenceResource],
      );
      const token = fence.rows[0]?.token;
      if (token === undefined) return nothing;
      const rows = await insertRuns(client, this.t, accepted, { token: BigInt(token), replicaId: standIn.replicaId });
      await advanceJobState(client, this.t, accepted);
      const result = batchResult(accepted, rows, []);
      return candidates.length > accepted.length
        ? { ...result, outdated: candidates.length - accepted.length }
        : result;
    });
  }

  /** The newest scheduled (not manual) fire of each of `jobs`: one indexed read of cw_job_state. */
  async lastFiredOf(jobs: readonly string[]): Promise<Map<string, Date>> {
    if (jobs.length === 0) return new Map();
    const res = await this.pool.query<{ job: string; last_scheduled_at: Date }>(
      `SELECT job, last_scheduled_at FROM ${this.t.jobState} WHERE job = ANY($1::text[]) AND last_scheduled_at IS NOT NULL`,
      [[...jobs]],
    );
    return new Map(res.rows.map((r) => [r.job, r.last_scheduled_at]));
  }

  /**
   * Overlap 'replace': for each job with an inserted fire marked `replace`, cancel its other active
   * runs, naming the newest such fire. Only ever inside commitFires, after the fence.
   */
  private async cancelReplaced(
    client: pg.PoolClient,
    fires: FireRequest[],
    inserted: Omit<CommittedFire, 'hold'>[],
  ): Promise<bigint[]> {
    const insertedSlots = new Set(inserted.map(slotKey));
    const replacedBy = new Map<string, Date>(); // job → its newest inserted 'replace' fire
    for (const f of fires) {
      if (!f.replace || !insertedSlots.has(slotKey(f))) continue;
      const prev = replacedBy.get(f.job);
      if (!prev || prev < f.scheduledAt) replacedBy.set(f.job, f.scheduledAt);
    }
    const keep = inserted.map((r) => r.runId);
    const cancelled: bigint[] = [];
    for (const [job, at] of replacedBy) {
      cancelled.push(...(await this.cancelActive(job, `replaced by the fire of ${at.toISOString()}`, client, keep)));
    }
    return cancelled;
  }

  /**
   * Mark runs handed to the queue. Only a hint for the outbox: if a crash loses it, the outbox
   * enqueues the runs again and the queue drops the repeat (job id per run). So it commits without
   * waiting for the WAL flush (synchronous_commit off, this transaction only), one round trip.
   */
  async markEnqueued(runIds: bigint[]): Promise<void> {
    if (runIds.length === 0) return;
    await this.pool.query(
      `SET LOCAL synchronous_commit TO off;
       UPDATE ${this.t.runs} SET enqueued_at = now()
       WHERE id = ANY('{${runIds.map(sqlInt).join(',')}}'::bigint[]) AND enqueued_at IS NULL`,
    );
  }

  /**
   * The outbox: committed runs not yet handed to the queue. A run of an overlap-'queue' job waits
   * here while a handed-over run of its job is still active, and behind every earlier active run of
   * its job, so the runs waiting in a queue (overlapQueueMax > 1) go one at a time, in order.
   */
  async unenqueued(limit: number, queuedJobs: string[]): Promise<CommittedFire[]> {
    const res = await this.pool.query<{ id: string; job: string; scheduled_at: Date; trigger: FireTrigger }>(
      `SELECT r.id, r.job, r.scheduled_at, r.trigger FROM ${this.t.runs} r
       WHERE r.enqueued_at IS NULL AND r.state = 'pending' AND (r.trigger <> 'once' OR r.scheduled_at <= now())
         AND NOT (r.job = ANY($2::text[]) AND EXISTS (
           SELECT 1 FROM ${this.t.runs} a WHERE a.job = r.job AND a.id <> r.id
             AND (a.enqueued_at IS NOT NULL OR a.id < r.id) AND a.state IN ${ACTIVE_SQL}))
       ORDER BY r.created_at, r.id LIMIT $1`,
      [limit, queuedJobs],
    );
    return res.rows.map((r) => ({
      runId: BigInt(r.id),
      job: r.job,
      scheduledAt: r.scheduled_at,
      trigger: r.trigger,
      state: 'pending',
      hold: false,
    }));
  }

  /** Latest scheduled (not manual, not one-off) fire per job, for reconciliation after an election. */
  async lastFired(): Promise<Map<string, Date>> {
    const res = await this.pool.query<{ job: string; last_scheduled_at: Date }>(
      `SELECT job, last_scheduled_at FROM ${this.t.jobState} WHERE last_scheduled_at IS NOT NULL`,
    );
    return new Map(res.rows.map((r) => [r.job, r.last_scheduled_at]));
  }

  async pausedJobs(): Promise<Set<string>> {
    const res = await this.pool.query<{ job: string }>(`SELECT job FROM ${this.t.jobState} WHERE paused`);
    return new Set(res.rows.map((r) => r.job));
  }

  /** Pause or resume without a reason; either clears an earlier pause's reason and expiry (pauses.ts). */
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

  /** Leader only: lift expired pauses under the scheduler's fence; see pauses.ts. */
  expirePauses(nowMs: number, fence: { resource: string; token: bigint }): Promise<JobPause[]> {
    return expirePauses(this.pool, this.t, nowMs, fence);
  }

  /** Active runs (pending, running, retrying) of the given jobs, and how many wait undelivered. */
  async activeJobs(jobs: string[]): Promise<Map<string, { ids: bigint[]; held: number }>> {
    if (jobs.length === 0) return new Map();
    const res = await this.pool.query<{ job: string; ids: string[]; held: number }>(
      `SELECT job, array_agg(id::text) AS ids, (count(*) FILTER (WHERE enqueued_at IS NULL))::int AS held
       FROM ${this.t.runs} WHERE job = ANY($1::text[]) AND state IN ${ACTIVE_SQL} GROUP BY job`,
      [jobs],
    );
    return new Map(res.rows.map((r) => [r.job, { ids: r.ids.map((id) => BigInt(id)), held: r.held }]));
  }

  /**
   * The re-delivery sweep's batch: active runs handed to the queue (enqueued_at set) that were not
   * looked at for `olderThanMs`, oldest first, marked as looked at now. Only active runs are
   * scanned (the partial index cw_runs_active), so the cost follows the backlog, not the ledger.
   */
  async deliveriesToCheck(olderThanMs: number, limit: number): Promise<HandedOverRun[]> {
    const res = await this.pool.query<{
      id: string;
      job: string;
      scheduled_at: Date;
      state: string;
      claim_token: string | null;
    }>(
      `WITH due AS (
         SELECT id FROM ${this.t.runs}
         WHERE state IN ${ACTIVE_SQL} AND enqueued_at IS NOT NULL
           AND COALESCE(delivery_checked_at, enqueued_at) < now() - $1::bigint * interval '1 millisecond'
         ORDER BY COALESCE(delivery_checked_at, enqueued_at) LIMIT $2
         FOR UPDATE SKIP LOCKED)
       UPDATE ${this.t.runs} r SET delivery_checked_at = now() FROM due WHERE r.id = due.id
       RETURNING r.id, r.job, r.scheduled_at, r.state, r.claim_token`,
      [Math.floor(olderThanMs), limit],
    );
    return res.rows.map((r) => ({
      runId: BigInt(r.id),
      job: r.job,
      scheduledAt: r.scheduled_at,
      state: r.state,
      claimToken: r.claim_token === null ? null : BigInt(r.claim_token),
    }));
  }

  /**
   * Settle a run the queue gave up on while the ledger never heard its outcome: failed, with the
   * reason, unless its state or newest claim moved on since it was read (then someone is on it).
   */
  async failUnrecorded(run: HandedOverRun, reason: string): Promise<boolean> {
    const stored = storedError(reason);
    return withTransaction(this.pool, async (client) => {
      const res = await client.query(
        `UPDATE ${this.t.runs} SET state = 'failed', finished_at = now(), error = $3
         WHERE id = $1 AND state IN ${ACTIVE_SQL} AND claim_token IS NOT DISTINCT FROM $2::bigint`,
        [run.runId.toString(), run.claimToken?.toString() ?? null, stored.message],
      );
      if (res.rowCount !== 1) return false;
      await client.query(
        `UPDATE ${this.t.runAttempts} SET state = 'failed', finished_at = now(), error = $2 WHERE run_id = $1 AND state = 'running'`,
        [run.runId.toString(), stored.message],
      );
      return true;
    });
  }

  /**
   * Mark active runs of a job cancelled, except `keep`; returns the run ids. Overlap 'replace'
   * calls it only inside commitFires, after the fence: never call it outside a fenced transaction.
   */
  private async cancelActive(
    job: string,
    reason: string,
    db: Queryable = this.pool,
    keep: bigint[] = [],
  ): Promise<bigint[]> {
    const res = await db.query<{ id: string }>(
      `UPDATE ${this.t.runs} SET state = 'cancelled', finished_at = now(), error = $2
       WHERE job = $1 AND state IN ${ACTIVE_SQL} AND id <> ALL($3::bigint[]) RETURNING id`,
      [job, reason, keep.map(String)],
    );
    return res.rows.map((r) => BigInt(r.id));
  }

  /**
   * A job removed from the code: settle its active runs `cancelled` with `reason`, once no live
   * replica defines it (`defined`: the jobs of every live member). Runs younger than `graceMs`
   * are left alone (a replica that defines the job may just be starting). node-cron coordinator
   * runs ("node-cron:…") are not jobs of any replica and are never touched. Returns the run ids.
   */
  async cancelRunsOfUndefinedJobs(
    defined: readonly string[],
    reason: string,
    graceMs: number,
  ): Promise<{ runId: bigint; job: string }[]> {
    const res = await this.pool.query<{ id: string; job: string }>(
      `UPDATE ${this.t.runs} SET state = 'cancelled', finished_at = now(), error = $2
       WHERE state IN ${ACTIVE_SQL} AND split_part(job, '/', 1) <> ALL($1::text[]) AND job NOT LIKE 'node-cron:%'
         AND created_at < now() - $3::bigint * interval '1 millisecond'
       RETURNING id, job`,
      [[...defined], reason, Math.floor(graceMs)],
    );
    return res.rows.map((r) => ({ runId: BigInt(r.id), job: r.job }));
  }

  /**
   * Forget the per-job state (last fire, pause flag) of jobs no live replica defines and that have
   * no active run left: a removed job's row would otherwise stay for ever. Returns the jobs.
   */
  async forgetUndefinedJobs(defined: readonly string[]): Promise<string[]> {
    const res = await this.pool.query<{ job: string }>(
      `DELETE FROM ${this.t.jobState} s
       WHERE split_part(s.job, '/', 1) <> ALL($1::text[]) AND s.job NOT LIKE 'node-cron:%'
         AND NOT EXISTS (SELECT 1 FROM ${this.t.runs} r WHERE r.job = s.job AND r.state IN ${ACTIVE_SQL})
       RETURNING s.job`,
      [[...defined]],
    );
    return res.rows.map((r) => r.job);
  }

  /**
   * Retention: delete up to `batch` finished runs (completed, failed, skipped, cancelled) created
   * more than `olderThanMs` ago, with their attempts (ON DELETE CASCADE). Returns how many went.
   * Safe for the schedule: reconciliation after an election reads cw_job_state, not old runs, so
   * a deleted run's instant is never fired again.
   */
  async pruneFinishedRuns(olderThanMs: number, batch: number): Promise<number> {
    const res = await this.pool.query(
      `DELETE FROM ${this.t.runs} WHERE id IN (
         SELECT id FROM ${this.t.runs}
         WHERE state IN ${FINISHED_SQL} AND created_at < now() - $1::bigint * interval '1 millisecond'
         LIMIT $2)`,
      [Math.floor(olderThanMs), batch],
    );
    return res.rowCount ?? 0;
  }

  /** Retry a failed or cancelled run under the leader's fence (run-retry.ts). */
  retryRun(runId: bigint, leader: LeaderStamp): Promise<RetriedRun | undefined> {
    return retryRun(this.pool, this.t, runId, leader);
  }

  /** A won election (a tenure); returns its id, for recording the tenure's renews and release (tenures.ts). */
  async recordElection(leaseName: string, leader: string, token: bigint, backend: string): Promise<bigint> {
    const res = await this.pool.query<{ id: string }>(
      `INSERT INTO ${this.t.elections} (lease_name, leader, token, backend) VALUES ($1, $2, $3, $4) RETURNING id`,
      [leaseName, leader, token.toString(), backend],
    );
    return BigInt(res.rows[0]!.id);
  }
}

function slotKey(f: { job: string; scheduledAt: Date }): string {
  return `${f.job}@${f.scheduledAt.getTime()}`;
}

function batchResult(fires: FireRequest[], rows: Omit<CommittedFire, 'hold'>[], cancelled: bigint[]): FireBatchResult {
  const held = new Set(fires.filter((f) => f.hold).map(slotKey));
  return {
    committed: rows.map((r) => ({ ...r, hold: held.has(slotKey(r)) })),
    duplicates: fires.length - rows.length,
    cancelled,
  };
}

/** Insert the fires under the unique (job, scheduled_at) key; returns the ones inserted. */
async function insertRuns(
  client: pg.PoolClient,
  t: Tables,
  fires: FireRequest[],
  leader: CommitStamp,
): Promise<Omit<CommittedFire, 'hold'>[]> {
  const res = await client.query<{
    id: string;
    job: string;
    scheduled_at: Date;
    trigger: FireTrigger;
    state: 'pending' | 'skipped';
  }>(
    `INSERT INTO ${t.runs} (job, scheduled_at, trigger, leader_token, leader_id, state, enqueued_at, finished_at, error,
       schedule_version, payload)
     SELECT f.job, f.scheduled_at, f.trigger, $2, $3, f.state,
            CASE WHEN f.state = 'skipped' THEN now() END,
            CASE WHEN f.state = 'skipped' THEN now() END,
            f.error, f.schedule_version, f.payload
     FROM jsonb_to_recordset($1::jsonb)
       AS f(job text, scheduled_at timestamptz, trigger text, state text, error text, schedule_version int, payload jsonb)
     ON CONFLICT (job, scheduled_at) WHERE trigger NOT IN ('manual', 'once') DO NOTHING
     RETURNING id, job, scheduled_at, trigger, state`,
    [fireRecords(fires), leader.token.toString(), leader.replicaId],
  );
  return res.rows.map((r) => ({
    runId: BigInt(r.id),
    job: r.job,
    scheduledAt: r.scheduled_at,
    trigger: r.trigger,
    state: r.state,
  }));
}

/** The fires as the JSON that jsonb_to_recordset reads in the statements below. */
function fireRecords(fires: FireRequest[]): string {
  return JSON.stringify(
    fires.map((f) => ({
      job: f.job,
      scheduled_at: f.scheduledAt.toISOString(),
      trigger: f.trigger,
      state: f.state ?? 'pending',
      error: f.error ?? null,
      schedule_version: f.schedule?.version ?? null,
      payload: f.payload ?? null,
    })),
  );
}

/** Move each job's last scheduled fire forward (never back); manual triggers do not count. */
async function advanceJobState(client: pg.PoolClient, t: Tables, fires: FireRequest[]): Promise<void> {
  await client.query(
    `INSERT INTO ${t.jobState} AS s (job, last_scheduled_at)
     SELECT job, max(scheduled_at) FROM jsonb_to_recordset($1::jsonb) AS f(job text, scheduled_at timestamptz) GROUP BY job
     ON CONFLICT (job) DO UPDATE SET last_scheduled_at = GREATEST(s.last_scheduled_at, EXCLUDED.last_scheduled_at), updated_at = now()`,
    [fireRecords(fires.filter((f) => f.trigger !== 'manual'))],
  );
}

/**
 * One statement, one round trip: advance the leader's fence, and only if it accepted the token,
 * insert the fires under the unique (job, scheduled_at) key and move each job's last scheduled
 * fire forward (never back; manual triggers do not count). Returns the fires inserted; throws
 * StaleTokenError when the fence refused (nothing was written).
 */
async function fenceAndInsert(
  client: pg.PoolClient,
  t: Tables,
  fires: FireRequest[],
  leader: LeaderStamp,
): Promise<Omit<CommittedFire, 'hold'>[]> {
  const res = await client.query<{ fenced: boolean; runs: InsertedRow[] | null }>(
    `WITH fence AS (
       INSERT INTO ${t.fences} AS f (resource, token) VALUES ($4, $2)
       ON CONFLICT (resource) DO UPDATE SET token = EXCLUDED.token, updated_at = now()
       WHERE f.token <= EXCLUDED.token
       RETURNING token),
     fire AS (
       SELECT * FROM jsonb_to_recordset($1::jsonb)
         AS f(job text, scheduled_at timestamptz, trigger text, state text, error text, schedule_version int, payload jsonb)),
     inserted AS (
       INSERT INTO ${t.runs} (job, scheduled_at, trigger, leader_token, leader_id, state, enqueued_at, finished_at, error,
         schedule_version, payload)
       SELECT f.job, f.scheduled_at, f.trigger, $2, $3, f.state,
              CASE WHEN f.state = 'skipped' THEN now() END,
              CASE WHEN f.state = 'skipped' THEN now() END,
              f.error, f.schedule_version, f.payload
       FROM fire f WHERE EXISTS (SELECT 1 FROM fence)
       ON CONFLICT (job, scheduled_at) WHERE trigger NOT IN ('manual', 'once') DO NOTHING
       RETURNING id, job, scheduled_at, trigger, state),
     job_state AS (
       INSERT INTO ${t.jobState} AS s (job, last_scheduled_at)
       SELECT job, max(scheduled_at) FROM fire WHERE trigger <> 'manual' AND EXISTS (SELECT 1 FROM fence) GROUP BY job
       ON CONFLICT (job) DO UPDATE
         SET last_scheduled_at = GREATEST(s.last_scheduled_at, EXCLUDED.last_scheduled_at), updated_at = now())
     SELECT EXISTS (SELECT 1 FROM fence) AS fenced,
            (SELECT json_agg(json_build_array(id::text, job, scheduled_at, trigger, state)) FROM inserted) AS runs`,
    [fireRecords(fires), leader.token.toString(), leader.replicaId, leader.fenceResource],
  );
  const row = res.rows[0]!;
  if (!row.fenced)
    throw new StaleTokenError(leader.fenceResource, leader.token, await fenceToken(client, t, leader.fenceResource));
  return (row.runs ?? []).map(([id, job, scheduledAt, trigger, state]) => ({
    runId: BigInt(id),
    job,
    scheduledAt: new Date(scheduledAt),
    trigger,
    state,
  }));
}

/** An inserted run as the statement above returns it (JSON: the instant as text). */
type InsertedRow = [id: string, job: string, scheduledAt: string, trigger: FireTrigger, state: 'pending' | 'skipped'];
