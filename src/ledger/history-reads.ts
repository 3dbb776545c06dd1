/**
 * Reads of the ledger's history for the failover drill and its checker: runs in a window, the
 * workload's effect and attempt-log rows joined to them, commit instants and refused attempts.
 */
import type { Queryable } from './transaction.js';
import { SLOT_KEY_PREDICATE } from '../db/schema.js';
import type { Tables } from '../db/tables.js';

export interface RunHistoryRow {
  id: bigint;
  job: string;
  scheduledAt: number;
  leaderToken: bigint;
  /** 'schedule', 'catchup' or 'standin' (a follower committed it for a silent leader). */
  trigger: string;
  state: string;
  /** Token of the attempt that completed the run, if any. */
  completedToken: bigint | null;
  /** When the ledger committed the fire (database clock). */
  committedAt: number;
}

const TABLE_NAME = /^[a-z_][a-z0-9_]*$/;

function tableName(kind: string, name: string): string {
  if (!TABLE_NAME.test(name)) throw new TypeError(`bad ${kind} table name ${name}`);
  return name;
}

/**
 * Scheduled (not manual) runs of jobs named `jobPrefix…` scheduled or committed in [from, to], in
 * commit order. Committed in the window but scheduled after it: fired early, which a checker must see.
 */
export async function runsInWindow(
  db: Queryable,
  t: Tables,
  from: Date,
  to: Date,
  jobPrefix = '',
): Promise<RunHistoryRow[]> {
  const res = await db.query<{
    id: string;
    job: string;
    scheduled_at: Date;
    leader_token: string;
    trigger: string;
    state: string;
    completed_token: string | null;
    created_at: Date;
  }>(
    `SELECT r.id, r.job, r.scheduled_at, r.leader_token, r.trigger, r.state, r.created_at,
            (SELECT a.token FROM ${t.runAttempts} a WHERE a.run_id = r.id AND a.state = 'completed' ORDER BY a.attempt DESC LIMIT 1) AS completed_token
     FROM ${t.runs} r
     WHERE (r.scheduled_at BETWEEN $1 AND $2 OR r.created_at BETWEEN $1 AND $2) AND r.${SLOT_KEY_PREDICATE} AND r.job LIKE $3
     ORDER BY r.id`,
    [from, to, `${jobPrefix}%`],
  );
  return res.rows.map((r) => ({
    id: BigInt(r.id),
    job: r.job,
    scheduledAt: r.scheduled_at.getTime(),
    leaderToken: BigInt(r.leader_token),
    trigger: r.trigger,
    state: r.state,
    completedToken: r.completed_token === null ? null : BigInt(r.completed_token),
    committedAt: r.created_at.getTime(),
  }));
}

/** Rows (run_id, token) of a workload's effect table whose run is scheduled in [from, to]. */
export async function effectsInWindow(
  db: Queryable,
  t: Tables,
  effectsTable: string,
  from: Date,
  to: Date,
): Promise<{ runId: bigint; token: bigint }[]> {
  const res = await db.query<{ run_id: string; token: string }>(
    `SELECT e.run_id, e.token FROM ${tableName('effects', effectsTable)} e JOIN ${t.runs} r ON r.id = e.run_id WHERE r.scheduled_at BETWEEN $1 AND $2`,
    [from, to],
  );
  return res.rows.map((e) => ({ runId: BigInt(e.run_id), token: BigInt(e.token) }));
}

/** Rows (run_id, token, outcome) of a workload's attempt log whose run is scheduled in [from, to], in log order. */
export async function attemptLogInWindow(
  db: Queryable,
  t: Tables,
  logTable: string,
  from: Date,
  to: Date,
): Promise<{ runId: bigint; token: bigint; outcome: string }[]> {
  const res = await db.query<{ run_id: string; token: string; outcome: string }>(
    `SELECT l.run_id, l.token, l.outcome FROM ${tableName('attempt log', logTable)} l JOIN ${t.runs} r ON r.id = l.run_id
     WHERE r.scheduled_at BETWEEN $1 AND $2 ORDER BY l.id`,
    [from, to],
  );
  return res.rows.map((l) => ({ runId: BigInt(l.run_id), token: BigInt(l.token), outcome: l.outcome }));
}

/** When the newest fire was committed (epoch ms, database clock), 0 if none. */
export async function lastCommitAt(db: Queryable, t: Tables): Promise<number> {
  const r = await db.query<{ t: Date | null }>(`SELECT max(created_at) AS t FROM ${t.runs}`);
  return r.rows[0]?.t?.getTime() ?? 0;
}

/**
 * The first fire committed after `after` (under a leader token above `aboveToken`, if given; of one
 * of `jobs`, if given: one shard's jobs, whose tokens are its own lease's), or null.
 */
export async function firstCommitAfter(
  db: Queryable,
  t: Tables,
  after: Date,
  aboveToken?: bigint,
  jobs?: readonly string[],
): Promise<number | null> {
  const params: unknown[] = [after, aboveToken?.toString() ?? null];
  if (jobs) params.push(jobs);
  const r = await db.query<{ t: Date | null }>(
    `SELECT min(created_at) AS t FROM ${t.runs} WHERE created_at > $1 AND ($2::bigint IS NULL OR leader_token > $2)` +
      (jobs ? ' AND job = ANY($3::text[])' : ''),
    params,
  );
  return r.rows[0]?.t?.getTime() ?? null;
}

/** How many runs scheduled in [from, to] are not completed yet. */
export async function uncompletedRunsIn(db: Queryable, t: Tables, from: Date, to: Date): Promise<number> {
  const r = await db.query<{ n: number }>(
    `SELECT count(*)::int AS n FROM ${t.runs} WHERE scheduled_at BETWEEN $1 AND $2 AND state <> 'completed'`,
    [from, to],
  );
  return r.rows[0]?.n ?? 0;
}

/**
 * Scheduled instants of refused stale attempts: refused outright ('stale'), or found the run
 * already completed by a newer claim ('skipped' with a lower token). A re-delivery after
 * completion has a higher token and is not counted.
 */
export async function staleAttemptTimes(db: Queryable, t: Tables): Promise<number[]> {
  const r = await db.query<{ t: Date }>(
    `SELECT r.scheduled_at AS t FROM ${t.runAttempts} a JOIN ${t.runs} r ON r.id = a.run_id
     WHERE a.state = 'stale'
        OR (a.state = 'skipped' AND EXISTS (SELECT 1 FROM ${t.runAttempts} c WHERE c.run_id = a.run_id AND c.state = 'completed' AND c.token > a.token))`,
  );
  return r.rows.map((row) => row.t.getTime());
}
