/**
 * The live ledger check's reads (scheduler/chores/ledger-check.ts): what the invariant checks
 * (invariant-checks.ts) need and nothing more, so a healthy ledger answers with a few rows, and
 * each run is read about once (a round reads what was committed since the last):
 * - the runs of slots counted twice (I1, counted as the drill counts: runs under the slot key);
 * - each (job, leader token) pair's first and last run id (I3: if any run of a shard is out of
 *   token order, the last run of its pair is, against the first run of a pair with a higher token),
 *   normally one pair per job and tenure;
 * - unfinished runs no one is on past their bound (I6), through the index of unfinished runs.
 * The reports are kept here too: the leader writes each, every replica reads the last.
 */
import { SLOT_KEY_PREDICATE } from '../db/schema.js';
import type { Tables } from '../db/tables.js';
import type { RunRecord, StepsOfRun } from './invariant-checks.js';
import { mayDeliverSql } from './run-limits.js';
import { ACTIVE_SQL, openRunsOf } from './run-states.js';
import type { Queryable } from './transaction.js';
import { claimerAlive } from './worker-liveness.js';

/**
 * What one round reads: the runs committed in the last `windowMs` (at most the newest `maxRows`
 * run ids), or, after the first round, only those committed since `since` (the previous round's
 * read, minus a slack for transactions that were still open then).
 */
export interface CheckWindow {
  windowMs: number;
  maxRows: number;
  /** The previous round's read (its `readAt` minus the slack); null: read the whole window. */
  since: Date | null;
  /**
   * A run committed this long after its instant is late (catch-up, stand-in, backfill): the read
   * looks for another run of its slot anywhere in the ledger, since the two may be rounds apart.
   */
  lateAfterMs: number;
}

/** Per (job, leader token) pair of what was read: its first and last run id, and when the last committed. */
export interface TokenPair {
  job: string;
  leaderToken: bigint;
  firstId: bigint;
  lastId: bigint;
  lastAt: number;
}

export interface WindowReads {
  /** The database's clock at the read: the next round reads from here (minus the slack). */
  readAt: Date;
  /** Runs read (under the slot key). */
  runs: number;
  /** Whether maxRows cut the read short. */
  capped: boolean;
  /**
   * The runs of every slot with more than one counted run (up to `examples` slots): slots twice
   * among the runs read, and late runs' slots with another run anywhere.
   */
  duplicateRuns: RunRecord[];
  pairs: TokenPair[];
}

/** The slot-key runs of the read and what I1 and I3 need of them: one statement, one scan. */
export async function readWindow(db: Queryable, t: Tables, w: CheckWindow, examples: number): Promise<WindowReads> {
  const res = await db.query<{
    kind: 'window' | 'slot' | 'pair';
    id: string;
    last_id: string | null;
    job: string | null;
    scheduled_at: Date | null;
    leader_token: string | null;
    state: string | null;
    created_at: Date;
  }>(
    `WITH w AS MATERIALIZED (
       SELECT id, job, scheduled_at, leader_token, state, created_at FROM ${t.runs}
       WHERE id > (SELECT COALESCE(max(id), 0) FROM ${t.runs}) - $2::bigint
         AND created_at > GREATEST(COALESCE($4::timestamptz, '-infinity'), now() - $1::bigint * interval '1 millisecond')
         AND ${SLOT_KEY_PREDICATE}),
     twice AS (
       (SELECT job, scheduled_at FROM w GROUP BY job, scheduled_at HAVING count(*) > 1
        UNION
        SELECT w.job, w.scheduled_at FROM w WHERE w.created_at > w.scheduled_at + $5::bigint * interval '1 millisecond'
          AND EXISTS (SELECT 1 FROM ${t.runs} o WHERE o.job = w.job AND o.scheduled_at = w.scheduled_at AND o.id <> w.id
            AND o.${SLOT_KEY_PREDICATE}))
       LIMIT $3)
     SELECT 'window' AS kind, count(*)::text AS id, NULL::text AS last_id, NULL AS job, NULL::timestamptz AS scheduled_at,
       NULL::text AS leader_token, NULL AS state, now() AS created_at FROM w
     UNION ALL
     SELECT 'slot', r.id::text, NULL, r.job, r.scheduled_at, r.leader_token::text, r.state, r.created_at
     FROM ${t.runs} r JOIN twice USING (job, scheduled_at) WHERE r.${SLOT_KEY_PREDICATE}
     UNION ALL
     SELECT 'pair', min(id)::text, max(id)::text, job, NULL, leader_token::text, NULL, max(created_at)
     FROM w GROUP BY job, leader_token`,
    [Math.floor(w.windowMs), w.maxRows, examples, w.since, Math.floor(w.lateAfterMs)],
  );
  let runs = 0;
  let readAt = new Date(0);
  const duplicateRuns: RunRecord[] = [];
  const pairs: TokenPair[] = [];
  for (const r of res.rows) {
    if (r.kind === 'window') [runs, readAt] = [Number(r.id), r.created_at];
    else if (r.kind === 'slot')
      duplicateRuns.push({
        id: BigInt(r.id),
        job: r.job!,
        scheduledAt: r.scheduled_at!.getTime(),
        leaderToken: BigInt(r.leader_token!),
        state: r.state!,
        completedToken: null,
        committedAt: r.created_at.getTime(),
      });
    else
      pairs.push({
        job: r.job!,
        leaderToken: BigInt(r.leader_token!),
        firstId: BigInt(r.id),
        lastId: BigInt(r.last_id!),
        lastAt: r.created_at.getTime(),
      });
  }
  return { readAt, runs, capped: runs >= w.maxRows, duplicateRuns, pairs };
}

/** How long an unfinished run may go with no one on it before the check reports it (I6). */
export interface UnsettledBounds {
  /**
   * A running run whose worker has not beaten for this long: its worker is dead and no live
   * worker took the run over (they do within the claimer window plus a poll).
   */
  runningMs: number;
  /**
   * A run due to start (not waiting for a retry's backoff, a delay, a rate limit's turn, a
   * concurrency slot in order, an earlier run of its job under overlap 'queue', or a pause) that
   * neither the outbox handed over nor the re-delivery sweep looked at for this long.
   */
  waitingMs: number;
  /**
   * Added to waitingMs per handed-over run waiting: the re-delivery sweep looks at a batch of them
   * every interval, so with a backlog it comes back to each one later (intervalMs / batchSize).
   */
  sweepMsPerWaitingRun: number;
  /** Jobs with a timeout: a running run past its job's timeout plus runningMs, its worker alive or not. */
  timeouts: readonly { job: string; timeoutMs: number }[];
}

export interface UnsettledRun {
  id: bigint;
  job: string;
  scheduledAt: number;
  state: string;
  /** Why it counts: 'worker-dead', 'past-timeout' or 'not-delivered'. */
  why: 'worker-dead' | 'past-timeout' | 'not-delivered';
  /** For how long (ms, database clock). */
  forMs: number;
}

/**
 * Since when a waiting run `r` has been due and no one has handed it over or looked for it in the
 * queue: the latest of its commit, its retry's or delay's end (available_at), a one-off's instant,
 * its hand-over and the re-delivery sweep's last look (GREATEST skips NULLs).
 */
const WAITING_SINCE = `GREATEST(r.created_at, r.available_at, r.enqueued_at, r.delivery_checked_at,
  CASE WHEN r.trigger = 'once' THEN r.scheduled_at END)`;

/**
 * Unfinished runs no one is on past their bound, oldest first (up to `examples`), and how many
 * there are. Scans the unfinished runs only (cw_open_runs).
 */
export async function unsettledRuns(
  db: Queryable,
  t: Tables,
  b: UnsettledBounds,
  examples: number,
): Promise<{ count: number; runs: UnsettledRun[] }> {
  const res = await db.query<{
    id: string;
    job: string;
    scheduled_at: Date;
    state: string;
    why: UnsettledRun['why'];
    for_ms: number;
    total: number;
  }>(
    `WITH timeouts AS (SELECT * FROM unnest($3::text[], $4::bigint[]) AS x(job, timeout_ms)),
     backlog AS (
       SELECT count(*) * $6::float8 AS sweep_ms FROM ${openRunsOf(t, 'b')}
       WHERE b.state IN ('pending', 'retrying') AND b.enqueued_at IS NOT NULL),
     judged AS (
       SELECT r.id, r.job, r.scheduled_at, r.state,
         CASE
           WHEN r.state = 'running' AND x.timeout_ms IS NOT NULL
             AND r.started_at < now() - (x.timeout_ms + $1::bigint) * interval '1 millisecond' THEN 'past-timeout'
           WHEN r.state = 'running' AND r.started_at < now() - $1::bigint * interval '1 millisecond'
             AND NOT ${claimerAlive(t, '$1')} THEN 'worker-dead'
           WHEN r.state IN ('pending', 'retrying')
             AND ${WAITING_SINCE} < now() - ($2::bigint + CASE WHEN r.enqueued_at IS NULL THEN 0
               ELSE (SELECT sweep_ms FROM backlog) END) * interval '1 millisecond'
             AND ${mayDeliverSql(t, 'r')}
             AND NOT (r.enqueued_at IS NULL AND EXISTS (SELECT 1 FROM ${openRunsOf(t, 'a')} WHERE a_open.job = r.job AND a.id < r.id
               AND a.state IN ${ACTIVE_SQL}))
             AND NOT EXISTS (SELECT 1 FROM ${t.jobState} s WHERE s.job = r.job AND s.paused) THEN 'not-delivered'
         END AS why,
         CASE WHEN r.state = 'running' THEN r.started_at ELSE ${WAITING_SINCE} END AS since
       FROM ${openRunsOf(t, 'r')} LEFT JOIN timeouts x ON x.job = r.job
       WHERE r.state IN ${ACTIVE_SQL} AND r.kind <> 'workflow'
         AND r.created_at < now() - LEAST($1::bigint, $2::bigint) * interval '1 millisecond')
     SELECT id, job, scheduled_at, state, why, (extract(epoch FROM now() - since) * 1000)::float8 AS for_ms,
       count(*) OVER ()::int AS total
     FROM judged WHERE why IS NOT NULL ORDER BY since LIMIT $5`,
    [
      Math.floor(b.runningMs),
      Math.floor(b.waitingMs),
      b.timeouts.map((x) => x.job),
      b.timeouts.map((x) => Math.floor(x.timeoutMs)),
      examples,
      b.sweepMsPerWaitingRun,
    ],
  );
  return {
    count: res.rows[0]?.total ?? 0,
    runs: res.rows.map((r) => ({
      id: BigInt(r.id),
      job: r.job,
      scheduledAt: r.scheduled_at.getTime(),
      state: r.state,
      why: r.why,
      forMs: Math.round(Number(r.for_ms)),
    })),
  };
}

/** Keep this many reports; older ones are deleted as each new one is written. */
const REPORTS_KEPT = 100;

/** Write a report (JSON) and drop all but the newest REPORTS_KEPT. */
export async function saveLedgerCheck(db: Queryable, t: Tables, report: unknown): Promise<void> {
  await db.query(
    `WITH saved AS (INSERT INTO ${t.ledgerChecks} (report) VALUES ($1::jsonb) RETURNING id)
     DELETE FROM ${t.ledgerChecks} WHERE id <= (SELECT id FROM saved) - $2::bigint`,
    [JSON.stringify(report), REPORTS_KEPT],
  );
}

/** The newest report and when it was written (database clock), or null before the first. */
export async function lastLedgerCheck(db: Queryable, t: Tables): Promise<{ checkedAt: Date; report: unknown } | null> {
  const res = await db.query<{ checked_at: Date; report: unknown }>(
    `SELECT checked_at, report FROM ${t.ledgerChecks} ORDER BY id DESC LIMIT 1`,
  );
  const row = res.rows[0];
  return row ? { checkedAt: row.checked_at, report: row.report } : null;
}

/** A workflow run as I7 needs it (invariant-checks.ts, stepsStartedEarly). */
export interface WorkflowRunSteps extends StepsOfRun {
  id: bigint;
  workflow: string;
  scheduledAt: number;
}

/**
 * The workflow runs that made step runs in the read (since the last round, or in the whole window
 * at the first; at most `limit`), each with the steps it was started with and all its step runs.
 * A step run is made by the commit that completes its last need, and that commit touches the
 * workflow run again, so a step made too early is read again with what it needs.
 */
export async function workflowRunsTouched(
  db: Queryable,
  t: Tables,
  w: Pick<CheckWindow, 'windowMs' | 'since'>,
  limit: number,
): Promise<{ readAt: Date; runs: WorkflowRunSteps[] }> {
  const res = await db.query<{
    read_at: Date;
    id: string | null;
    job: string;
    scheduled_at: Date;
    steps: { name: string; needs: string[] }[] | null;
    step_run_id: string;
    step: string;
    item: number | null;
    started_at: Date | null;
    finished_at: Date | null;
  }>(
    `WITH touched AS (
       SELECT DISTINCT workflow_run_id AS id FROM ${t.runs}
       WHERE kind = 'step' AND created_at > GREATEST(COALESCE($2::timestamptz, '-infinity'), now() - $1::bigint * interval '1 millisecond')
       LIMIT $3),
     found AS (
       SELECT w.id, w.job, w.scheduled_at, w.result -> 'steps' AS steps,
         s.id AS step_run_id, s.step, s.item, s.started_at, s.finished_at
       FROM touched JOIN ${t.runs} w ON w.id = touched.id JOIN ${t.runs} s ON s.workflow_run_id = w.id)
     SELECT now() AS read_at, found.* FROM (SELECT 1) AS one LEFT JOIN found ON true
     ORDER BY found.id, found.step_run_id`,
    [Math.floor(w.windowMs), w.since, limit],
  );
  const runs = new Map<string, WorkflowRunSteps & { stepRuns: StepsOfRun['stepRuns'][number][] }>();
  for (const r of res.rows) {
    if (r.id === null) continue; // the one row of a read that found nothing
    let run = runs.get(r.id);
    if (!run) {
      run = { id: BigInt(r.id), workflow: r.job, scheduledAt: r.scheduled_at.getTime(), steps: r.steps, stepRuns: [] };
      runs.set(r.id, run);
    }
    run.stepRuns.push({
      id: BigInt(r.step_run_id),
      step: r.step,
      item: r.item,
      startedAt: r.started_at?.getTime() ?? null,
      finishedAt: r.finished_at?.getTime() ?? null,
    });
  }
  return { readAt: res.rows[0]!.read_at, runs: [...runs.values()] };
}
