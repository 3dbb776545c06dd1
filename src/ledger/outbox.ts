/**
 * The outbox: runs committed in the ledger but not yet handed to the queue. The ledger is the
 * truth and the queue is delivery, so the leader hands these over (again) until they are marked.
 */
import type pg from 'pg';
import type { FireTrigger } from '../cron/fire-trigger.js';
import type { Tables } from '../db/tables.js';
import type { CommittedFire } from './fire-batch.js';
import { perSchema } from './named-statement.js';
import { queryByKey, sqlPrepared } from './sql-prepared.js';
import { ACTIVE_SQL, openRunsOf } from './run-states.js';
import { sqlInt, sqlIntArray, sqlTextArray } from './transaction.js';

/**
 * Hand-over rows one sweep reads, oldest first: the fire path's in flight (at most a few chunks of
 * 250) and as many unconfirmed ones again. Bounded, so a hand-over table whose statistics lag its
 * churn (a row inserted and deleted per fire) never looks large enough to the planner to JIT-compile
 * a statement that takes a few ms (seen: 20 ms of JIT for 2 ms of work).
 */
const HAND_OVERS_READ = 2000;

const statements = perSchema((t) => ({
  /**
   * Up to $1 pending runs not handed over, oldest first: those never released to the queue
   * (enqueued_at NULL) and those a fire commit or a step completion released whose hand-over was
   * not confirmed (a cw_hand_overs row: the committer died or the queue failed between COMMIT and
   * addBulk). A run of a job in $2 (overlap 'queue') waits while a handed-over run of its job is
   * still active, and behind every earlier active run of its job, so the runs waiting in a queue
   * (overlapQueueMax > 1) go one at a time, in order. Hand-over rows of runs no longer pending (a
   * worker got the run though the confirmation was lost; retention deleted it) are dropped on the
   * way. From the hand-over rows (a few chunks in flight) to their runs by id, never the other
   * way: the runs may be a backlog of 100,000 pending (LIMIT 1 keeps the planner from a hash join
   * over them). Prepared and planned by key (sql-prepared.ts): the generic plan of the protocol-level
   * statement, made while cw_runs was small, joined the open runs to it by a sequential scan of the
   * whole table until an ANALYZE (measured: 69 ms a call once 50,000 runs had been added).
   */
  unenqueued: sqlPrepared(
    'outbox_unenqueued',
    ['int', 'text[]'],
    `WITH released AS (
       SELECT h.run_id, r.id, r.job, r.scheduled_at, r.trigger, r.available_at, r.created_at, r.state, r.enqueued_at
       FROM (SELECT run_id FROM ${t.handOvers} ORDER BY run_id LIMIT ${HAND_OVERS_READ}) h
       LEFT JOIN LATERAL (SELECT * FROM ${t.runs} r WHERE r.id = h.run_id LIMIT 1) r ON true),
     gone AS (
       DELETE FROM ${t.handOvers} h USING released x
       WHERE h.run_id = x.run_id AND x.state IS DISTINCT FROM 'pending'),
     waiting AS (
       SELECT r.id, r.job, r.scheduled_at, r.trigger, r.available_at, r.created_at FROM ${t.runs} r
       WHERE r.enqueued_at IS NULL AND r.state = 'pending' AND (r.trigger <> 'once' OR r.scheduled_at <= now())
       UNION ALL
       SELECT id, job, scheduled_at, trigger, available_at, created_at FROM released
       WHERE enqueued_at IS NOT NULL AND state = 'pending')
     SELECT r.id, r.job, r.scheduled_at, r.trigger, r.available_at FROM waiting r
     WHERE NOT (r.job = ANY($2::text[]) AND EXISTS (
         SELECT 1 FROM ${openRunsOf(t, 'a')} WHERE a_open.job = r.job AND a.id <> r.id
           AND (a.enqueued_at IS NOT NULL OR a.id < r.id) AND a.state IN ${ACTIVE_SQL}))
     ORDER BY r.created_at, r.id LIMIT $1`,
  ),
}));

/** Committed runs not yet handed to the queue (see the statement for overlap 'queue'). */
export async function unenqueued(
  pool: pg.Pool,
  t: Tables,
  limit: number,
  queuedJobs: string[],
): Promise<CommittedFire[]> {
  const res = await queryByKey(pool, statements(t).unenqueued, [sqlInt(limit), sqlTextArray(queuedJobs)]);
  const rows = res.rows as {
    id: string;
    job: string;
    scheduled_at: Date;
    trigger: FireTrigger;
    available_at: Date | null;
  }[];
  return rows.map((r) => ({
    runId: BigInt(r.id),
    job: r.job,
    scheduledAt: r.scheduled_at,
    trigger: r.trigger,
    state: 'pending',
    hold: false,
    availableAt: r.available_at,
  }));
}

/**
 * Mark runs handed to the queue: set when released (enqueued_at), and their hand-over rows gone.
 * Only a hint for the outbox: if a crash loses it, the outbox enqueues the runs again and the
 * queue drops the repeat (job id per run), or the worker's claim finds the run taken. So it
 * commits without waiting for the WAL flush (synchronous_commit off, this transaction only), in
 * one round trip: several statements in one simple query, which cannot carry parameters, hence no
 * named statement and the ids written out as integers. A fire commit released its runs already
 * (fire-commit.ts): for them only the narrow rows go, and the run rows are not even looked up.
 */
export async function markEnqueued(pool: pg.Pool, t: Tables, runIds: bigint[]): Promise<void> {
  if (runIds.length === 0) return;
  const ids = `${sqlIntArray(runIds)}::bigint[]`;
  await pool.query(
    `SET LOCAL synchronous_commit TO off;
     WITH released AS (DELETE FROM ${t.handOvers} WHERE run_id = ANY(${ids}) RETURNING run_id)
     UPDATE ${t.runs} SET enqueued_at = now()
     WHERE id IN (SELECT unnest(${ids}) EXCEPT SELECT run_id FROM released) AND enqueued_at IS NULL`,
  );
}
