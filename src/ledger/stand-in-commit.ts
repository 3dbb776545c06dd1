/**
 * A follower's commit of overdue slots the leader did not commit (stand-in.ts in the scheduler).
 * No lease, so no fence to advance: the fires carry the scheduler fence's current token, read under
 * a share lock on the fence row, so a leader's fenced commit and this one are serialised and the
 * tokens on committed runs never decrease in commit order (I3). The slot's unique keys (as in
 * fire-commit.ts) keep each slot once however many followers and leaders race for it (I1).
 *
 * Lock order, the same in the leader's commit (fire-commit.ts): the schedules' rows (sorted by id,
 * FOR SHARE), the fence row, the runs' unique keys (inLockOrder), the job state rows (by job). The
 * fence serialises the leader with the stand-ins but not two stand-ins (both hold it FOR SHARE),
 * so for those the order of the keys is what rules out a deadlock: a commit waits only for a key
 * or row after every one it holds, so no two commits can each wait for the other.
 */
import type pg from 'pg';
import type { FireTrigger } from '../cron/fire-trigger.js';
import type { Tables } from '../db/tables.js';
import type { StandInStamp } from './commit-stamps.js';
import {
  batchResult,
  currentScheduleVersions,
  FIRE_RECORDS_CTE,
  fireRecords,
  inLockOrder,
  insertFireRunsCtes,
  noFires,
  withHeld,
  withOutdated,
  type FireBatchResult,
  type FireRequest,
} from './fire-batch.js';
import { coalesceSkipped } from './coalesced-fires.js';
import { namedStatement, perSchema } from './named-statement.js';
import { fenceHoldLimit, withTransaction } from './transaction.js';

const statements = perSchema((t) => ({
  /** The fence $1's token, share-locked until COMMIT. */
  fenceShared: namedStatement('stand_in_fence', `SELECT token FROM ${t.fences} WHERE resource = $1 FOR SHARE`),
  /**
   * Insert fires $1 (fireRecords, in lock order) under token $2 of replica $3, as the leader's
   * commit does (insertFireRunsCtes); returns the ones inserted.
   */
  insertRuns: namedStatement(
    'stand_in_insert_runs',
    `WITH ${FIRE_RECORDS_CTE},
     ${insertFireRunsCtes(t, 'true')}
     SELECT id, job, scheduled_at, trigger, state FROM inserted`,
  ),
  /** Move each job's last scheduled fire forward to the latest of fires $1 (never back). */
  advanceJobState: namedStatement(
    'stand_in_job_state',
    `INSERT INTO ${t.jobState} AS s (job, last_scheduled_at)
     SELECT job, max(scheduled_at) FROM jsonb_to_recordset($1::jsonb) AS f(job text, scheduled_at timestamptz)
     GROUP BY job ORDER BY job
     ON CONFLICT (job) DO UPDATE SET last_scheduled_at = GREATEST(s.last_scheduled_at, EXCLUDED.last_scheduled_at), updated_at = now()`,
  ),
}));

/**
 * Before any leader has ever raised the fence there is no one to stand in for: nothing is
 * committed. Overlap 'replace' fires are never accepted here: cancelling other runs needs the
 * leader's fence. Runtime schedule fires are re-checked against the version in effect first, as
 * in commitFires, and everything is locked in its order (above).
 */
export async function commitStandInFires(
  pool: pg.Pool,
  t: Tables,
  requested: FireRequest[],
  standIn: StandInStamp,
  fenceIdleLimitMs: number,
): Promise<FireBatchResult> {
  const candidates = requested.filter((f) => !f.replace);
  if (candidates.length === 0) return noFires();
  return withTransaction(
    pool,
    async (client) => {
      const s = statements(t);
      const accepted = inLockOrder(await currentScheduleVersions(client, t, candidates));
      if (accepted.length === 0) return withOutdated(noFires(), candidates.length, 0);
      const fence = await client.query<{ token: string }>({ ...s.fenceShared, values: [standIn.fenceResource] });
      const token = fence.rows[0]?.token;
      if (token === undefined) return noFires();
      const inserted = await client.query<{
        id: string;
        job: string;
        scheduled_at: Date;
        trigger: FireTrigger;
        state: 'pending' | 'skipped';
      }>({ ...s.insertRuns, values: [fireRecords(accepted), token, standIn.replicaId] });
      // Manual triggers do not move a job's last scheduled fire.
      await client.query({
        ...s.advanceJobState,
        values: [fireRecords(accepted.filter((f) => f.trigger !== 'manual'))],
      });
      const { rows, held } = await coalesceSkipped(
        client,
        t,
        accepted,
        inserted.rows.map((r) => ({
          runId: BigInt(r.id),
          job: r.job,
          scheduledAt: r.scheduled_at,
          trigger: r.trigger,
          state: r.state,
        })),
      );
      return withOutdated(batchResult(withHeld(accepted, held), rows, []), candidates.length, accepted.length);
    },
    fenceHoldLimit(fenceIdleLimitMs),
  );
}
