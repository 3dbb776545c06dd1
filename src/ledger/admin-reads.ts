import type pg from 'pg';
import { ACTIVE_SQL, openRunsOf, activeRunStates, type ActiveRunState } from './run-states.js';
import type { Tables } from '../db/tables.js';
import type { MemberRecord } from './members.js';

/** Read-only ledger queries behind the admin API and the metrics. */
type Db = Pick<pg.Pool, 'query'>;

/** A member's row as its heartbeat wrote it, with when it was seen. */
export interface MemberRow extends Omit<MemberRecord, 'jobs'> {
  /** The jobs it defines (null: a replica too old to say). */
  jobs: string[] | null;
  startedAt: string;
  lastSeen: string;
  lastSeenAgoMs: number;
}

export async function listMembers(db: Db, t: Tables, withinMs = 60_000): Promise<MemberRow[]> {
  const res = await db.query<{
    replica_id: string;
    host: string;
    pid: number;
    version: string;
    role: string;
    admin_url: string | null;
    jobs: string[] | null;
    started_at: Date;
    last_seen: Date;
    ago_ms: number;
  }>(
    `SELECT replica_id, host, pid, version, role, admin_url, jobs, started_at, last_seen,
            (extract(epoch FROM now() - last_seen) * 1000)::float8 AS ago_ms
     FROM ${t.members} WHERE last_seen > now() - ($1::int * interval '1 millisecond') ORDER BY replica_id`,
    [withinMs],
  );
  return res.rows.map((r) => ({
    replicaId: r.replica_id,
    host: r.host,
    pid: r.pid,
    version: r.version,
    role: r.role,
    adminUrl: r.admin_url,
    jobs: r.jobs,
    startedAt: r.started_at.toISOString(),
    lastSeen: r.last_seen.toISOString(),
    lastSeenAgoMs: Math.max(0, Math.round(r.ago_ms)),
  }));
}

export async function memberAdminUrl(db: Db, t: Tables, replicaId: string): Promise<string | null> {
  const res = await db.query<{ admin_url: string | null }>(`SELECT admin_url FROM ${t.members} WHERE replica_id = $1`, [
    replicaId,
  ]);
  return res.rows[0]?.admin_url ?? null;
}

export async function electedAt(
  db: Db,
  t: Tables,
  leaseName: string,
  leader: string,
  token: bigint,
): Promise<string | null> {
  const res = await db.query<{ elected_at: Date }>(
    `SELECT elected_at FROM ${t.elections} WHERE lease_name = $1 AND leader = $2 AND token = $3 ORDER BY id DESC LIMIT 1`,
    [leaseName, leader, token.toString()],
  );
  return res.rows[0]?.elected_at.toISOString() ?? null;
}

export interface LastRun {
  runId: string;
  scheduledAt: string;
  trigger: string;
  state: string;
  finishedAt: string | null;
  error: string | null;
}

/**
 * Newest run (by scheduled time) of each job among those already due: a one-off run committed for
 * 9999-12-31 is not the job's last outcome (it would show `pending` for ever).
 */
export async function lastRuns(db: Db, t: Tables, jobs: string[]): Promise<Map<string, LastRun>> {
  const res = await db.query<{
    id: string;
    job: string;
    scheduled_at: Date;
    trigger: string;
    state: string;
    finished_at: Date | null;
    error: string | null;
  }>(
    `SELECT DISTINCT ON (job) id::text, job, scheduled_at, trigger, state, finished_at, error
     FROM ${t.runs} r WHERE job = ANY($1::text[]) AND scheduled_at <= now() ORDER BY job, scheduled_at DESC, r.id DESC`,
    [jobs],
  );
  return new Map(
    res.rows.map((r) => [
      r.job,
      {
        runId: r.id,
        scheduledAt: r.scheduled_at.toISOString(),
        trigger: r.trigger,
        state: r.state,
        finishedAt: r.finished_at?.toISOString() ?? null,
        error: r.error,
      },
    ]),
  );
}

/**
 * Won elections newest first. handoverMs: from the previous tenure's release (graceful) or, when
 * it never released (a crash, a partition), its last successful renew, to this election; that is
 * how long the cluster was without a leader it could know of. gapMs: from the previous tenure's
 * last committed fire to the first slot anyone committed after it (a stand-in follower, or the new
 * leader), read from the ledger's fires: how long the jobs went without a fire, which includes the
 * time to the next due slot, and which stand-ins shorten to about their grace whatever the
 * handover took. Manual, one-off and backfill runs are not slots that were due, and do not count.
 * sincePreviousMs: between the two elections.
 */
export async function listElections(db: Db, t: Tables, leaseName: string, limit: number) {
  const res = await db.query<{
    id: string;
    leader: string;
    token: string;
    backend: string;
    elected_at: Date;
    renewed_at: Date | null;
    released_at: Date | null;
    prev_leader: string | null;
    prev_token: string | null;
    since_prev_ms: number | null;
    gap_ms: number | null;
    handover_ms: number | null;
    handover_from: 'release' | 'renew' | 'election' | null;
  }>(
    `WITH e AS (
       SELECT id, leader, token, backend, elected_at, renewed_at, released_at,
              lag(leader) OVER w AS prev_leader, lag(token) OVER w AS prev_token, lag(elected_at) OVER w AS prev_at,
              lag(released_at) OVER w AS prev_released, lag(renewed_at) OVER w AS prev_renewed
       FROM ${t.elections} WHERE lease_name = $1 WINDOW w AS (ORDER BY id))
     SELECT e.id::text, e.leader, e.token::text, e.backend, e.elected_at, e.renewed_at, e.released_at,
            e.prev_leader, e.prev_token::text,
            (extract(epoch FROM e.elected_at - e.prev_at) * 1000)::float8 AS since_prev_ms,
            (extract(epoch FROM next_fire.created_at - prev_last.created_at) * 1000)::float8 AS gap_ms,
            (extract(epoch FROM e.elected_at - COALESCE(e.prev_released, e.prev_renewed, e.prev_at)) * 1000)::float8 AS handover_ms,
            CASE WHEN e.prev_at IS NULL THEN NULL WHEN e.prev_released IS NOT NULL THEN 'release'
                 WHEN e.prev_renewed IS NOT NULL THEN 'renew' ELSE 'election' END AS handover_from
     FROM e
     -- The previous tenure's last fire (index on leader_token, leader_id, created_at) ...
     LEFT JOIN LATERAL (
       SELECT r.created_at, r.scheduled_at FROM ${t.runs} r
       WHERE r.leader_token = e.prev_token AND r.leader_id = e.prev_leader AND r.created_at <= e.elected_at
       ORDER BY r.created_at DESC LIMIT 1) prev_last ON true
     -- ... and the first slot after it that anyone committed later (index on scheduled_at, id).
     LEFT JOIN LATERAL (
       SELECT r.created_at FROM ${t.runs} r
       WHERE r.scheduled_at >= prev_last.scheduled_at AND r.created_at > prev_last.created_at
         AND r.trigger IN ('schedule', 'catchup', 'standin')
       ORDER BY r.scheduled_at, r.id LIMIT 1) next_fire ON true
     ORDER BY e.id DESC LIMIT $2`,
    [leaseName, limit],
  );
  const ms = (v: number | null) => (v === null ? null : Math.round(v));
  return res.rows.map((r) => ({
    id: r.id,
    leader: r.leader,
    token: r.token,
    backend: r.backend,
    electedAt: r.elected_at.toISOString(),
    lastRenewedAt: r.renewed_at?.toISOString() ?? null,
    releasedAt: r.released_at?.toISOString() ?? null,
    previousLeader: r.prev_leader,
    previousToken: r.prev_token,
    sincePreviousMs: ms(r.since_prev_ms),
    gapMs: ms(r.gap_ms),
    /** Never negative: a renew racing the next election by a few ms is no handover at all. */
    handoverMs: r.handover_ms === null ? null : Math.max(0, Math.round(r.handover_ms)),
    /** What handoverMs is measured from: the previous tenure's 'release', last 'renew', or (old rows) its 'election'. */
    handoverFrom: r.handover_from,
  }));
}

/** How many runs are in each active state, cluster-wide. */
export async function activeRunCounts(db: Db, t: Tables): Promise<Map<ActiveRunState, number>> {
  const res = await db.query<{ state: ActiveRunState; n: number }>(
    `SELECT r.state, count(*)::int AS n FROM ${openRunsOf(t, 'r')} WHERE r.state IN ${ACTIVE_SQL} GROUP BY r.state`,
  );
  return new Map(activeRunStates.map((s) => [s, res.rows.find((r) => r.state === s)?.n ?? 0]));
}

export interface FinishedWorkflowRun {
  id: string;
  workflow: string;
  state: string;
  /** From its fire to its end. */
  seconds: number;
  finishedAt: Date;
}

/** Workflow runs that ended after `since` (at most `limit`), oldest first. */
export async function workflowRunsFinishedSince(
  db: Db,
  t: Tables,
  since: Date,
  limit = 10_000,
): Promise<FinishedWorkflowRun[]> {
  const res = await db.query<{ id: string; job: string; state: string; seconds: number; finished_at: Date }>(
    `SELECT id::text, job, state, extract(epoch FROM finished_at - created_at)::float8 AS seconds, finished_at
     FROM ${t.runs} WHERE workflow_finished_at > $1::timestamptz ORDER BY workflow_finished_at LIMIT $2`,
    [since, limit],
  );
  return res.rows.map((r) => ({
    id: r.id,
    workflow: r.job,
    state: r.state,
    seconds: r.seconds,
    finishedAt: r.finished_at,
  }));
}

/** How far back (newest runs of a job) the metrics look for its last success and its failure streak. */
export const JOB_HEALTH_WINDOW = 100;

export interface JobHealth {
  /** The scheduled instant of the job's newest committed fire (scheduled or catch-up). */
  lastFire: Date | null;
  /** When the newest completed run among the job's last JOB_HEALTH_WINDOW runs finished. */
  lastSuccess: Date | null;
  /** Failed runs newer than that completed one (all of the window's failures if none completed). */
  consecutiveFailures: number;
}

/**
 * What the alerting metrics need of each job, in one query: the last fire from cw_job_state (its
 * primary key), the last success and failure streak from the job's newest runs by the unique
 * (job, scheduled_at) index, at most JOB_HEALTH_WINDOW rows a job, so a scrape stays cheap however
 * long the ledger. Manual triggers are outside that index and so outside these figures.
 */
export async function jobHealth(db: Db, t: Tables, jobs: string[]): Promise<Map<string, JobHealth>> {
  const res = await db.query<{
    job: string;
    last_fire: Date | null;
    last_success: Date | null;
    failures: number;
  }>(
    `SELECT j.job, s.last_scheduled_at AS last_fire, h.last_success, coalesce(h.failures, 0)::int AS failures
     FROM unnest($1::text[]) AS j(job)
     LEFT JOIN ${t.jobState} s ON s.job = j.job
     LEFT JOIN LATERAL (
       SELECT max(finished_at) FILTER (WHERE state = 'completed') AS last_success,
              count(*) FILTER (WHERE state = 'failed' AND NOT succeeded_since) AS failures
       FROM (SELECT state, finished_at,
                    bool_or(state = 'completed') OVER (ORDER BY scheduled_at DESC ROWS UNBOUNDED PRECEDING) AS succeeded_since
             FROM ${t.runs} r WHERE r.job = j.job AND r.trigger <> 'manual'
             ORDER BY scheduled_at DESC LIMIT $2) recent
     ) h ON true`,
    [jobs, JOB_HEALTH_WINDOW],
  );
  return new Map(
    res.rows.map((r) => [
      r.job,
      { lastFire: r.last_fire, lastSuccess: r.last_success, consecutiveFailures: r.failures },
    ]),
  );
}
