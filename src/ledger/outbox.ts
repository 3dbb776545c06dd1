/**
 * The outbox: runs committed in the ledger but not yet handed to the queue. The ledger is the
 * truth and the queue is delivery, so the leader hands these over (again) until they are marked.
 */
import type pg from 'pg';
import type { FireTrigger } from '../cron/fire-trigger.js';
import type { Tables } from '../db/tables.js';
import type { CommittedFire } from './fire-batch.js';
import { namedStatement, perSchema } from './named-statement.js';
import { ACTIVE_SQL, UNFINISHED } from './run-states.js';
import { sqlInt, type Queryable } from './transaction.js';

const statements = perSchema((t) => ({
  /**
   * Up to $1 pending runs not handed over, oldest first. A run of a job in $2 (overlap 'queue')
   * waits while a handed-over run of its job is still active, and behind every earlier active run
   * of its job, so the runs waiting in a queue (overlapQueueMax > 1) go one at a time, in order.
   */
  unenqueued: namedStatement(
    'outbox_unenqueued',
    `SELECT r.id, r.job, r.scheduled_at, r.trigger, r.available_at FROM ${t.runs} r
     WHERE r.enqueued_at IS NULL AND r.state = 'pending' AND (r.trigger <> 'once' OR r.scheduled_at <= now())
       AND NOT (r.job = ANY($2::text[]) AND EXISTS (
         SELECT 1 FROM ${t.runs} a WHERE a.job = r.job AND a.id <> r.id
           AND (a.enqueued_at IS NOT NULL OR a.id < r.id) AND a.${UNFINISHED} AND a.state IN ${ACTIVE_SQL}))
     ORDER BY r.created_at, r.id LIMIT $1`,
  ),
}));

/** Committed runs not yet handed to the queue (see the statement for overlap 'queue'). */
export async function unenqueued(
  db: Queryable,
  t: Tables,
  limit: number,
  queuedJobs: string[],
): Promise<CommittedFire[]> {
  const res = await db.query<{
    id: string;
    job: string;
    scheduled_at: Date;
    trigger: FireTrigger;
    available_at: Date | null;
  }>({
    ...statements(t).unenqueued,
    values: [limit, queuedJobs],
  });
  return res.rows.map((r) => ({
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
 * Mark runs handed to the queue. Only a hint for the outbox: if a crash loses it, the outbox
 * enqueues the runs again and the queue drops the repeat (job id per run). So it commits without
 * waiting for the WAL flush (synchronous_commit off, this transaction only), in one round trip:
 * two statements in one simple query, which cannot carry parameters, hence no named statement
 * and the ids written out as integers.
 */
export async function markEnqueued(pool: pg.Pool, t: Tables, runIds: bigint[]): Promise<void> {
  if (runIds.length === 0) return;
  await pool.query(
    `SET LOCAL synchronous_commit TO off;
     UPDATE ${t.runs} SET enqueued_at = now()
     WHERE id = ANY('{${runIds.map(sqlInt).join(',')}}'::bigint[]) AND enqueued_at IS NULL`,
  );
}
