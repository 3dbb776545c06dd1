/**
 * The leader's commit of a batch of fires: advance its fence (a stale leader is refused here, not
 * by luck), insert each run unless its slot is taken (the unique (job, scheduled_at) key, and a
 * runtime schedule's (schedule_id, scheduled_at) whatever handler's name a run of it carries: a
 * conflict on either is DO NOTHING), move each job's last fire forward, and for overlap 'replace'
 * cancel the job's other active runs; all in one transaction, checked against the leader's local
 * deadline just before COMMIT. Each statement's WHERE clause is the point (graphile-worker style:
 * "only the writer that advances the row goes on").
 */
import type pg from 'pg';
import { StaleTokenError } from '../errors.js';
import type { Tables } from '../db/tables.js';
import type { LeaderStamp } from './commit-stamps.js';
import { fenceToken } from './fences.js';
import {
  advanceJobStateCte,
  batchResult,
  currentScheduleVersions,
  FIRE_RECORDS_CTE,
  fireRecords,
  INSERTED_JSON,
  insertedFires,
  inLockOrder,
  insertFireRunsCtes,
  noFires,
  slotKey,
  withHeld,
  withOutdated,
  type FireBatchResult,
  type FireRequest,
  type InsertedFire,
  type InsertedRow,
} from './fire-batch.js';
import { namedStatement, perSchema } from './named-statement.js';
import { coalesceSkipped } from './coalesced-fires.js';
import { recordMissedRanges, type MissedRangeRecord } from './missed-ranges.js';
import { ACTIVE_SQL } from './run-states.js';
import { cancelledAttempts } from './attempt-rows.js';
import { fenceHoldLimit, withTransaction } from './transaction.js';

const statements = perSchema((t) => ({
  /**
   * One round trip: take the leader's fence, and only if it accepted the token, insert the fires
   * and move each job's last scheduled fire forward (never back; manual triggers do not count).
   * $1 fires (fireRecords, in lock order), $2 token, $3 replica id, $4 fence resource. A fence
   * already at the token is held FOR SHARE (as a stand-in holds it), so the leader's chunks of one
   * tick commit side by side; a lower one is advanced, which waits for every holder to commit, so
   * the tokens on committed runs still never decrease in commit order (I3). Locks in the order
   * every fire commit takes them: the fence row, the runs' keys in the fires' order, the job state
   * rows by job. The runs handed over at once are released here (insertFireRunsCtes).
   */
  fenceAndInsert: namedStatement(
    'fence_and_insert_fires',
    `WITH held AS (
       SELECT token FROM ${t.fences} WHERE resource = $4 AND token = $2 FOR SHARE),
     advanced AS (
       INSERT INTO ${t.fences} AS f (resource, token) SELECT $4, $2 WHERE NOT EXISTS (SELECT 1 FROM held)
       ON CONFLICT (resource) DO UPDATE SET token = EXCLUDED.token, updated_at = now()
       WHERE f.token <= EXCLUDED.token
       RETURNING token),
     fence AS (SELECT token FROM held UNION ALL SELECT token FROM advanced),
     ${FIRE_RECORDS_CTE},
     ${insertFireRunsCtes(t, 'EXISTS (SELECT 1 FROM fence)')},
     ${advanceJobStateCte(t, 'EXISTS (SELECT 1 FROM fence)')}
     SELECT EXISTS (SELECT 1 FROM fence) AS fenced, ${INSERTED_JSON} AS runs`,
  ),
  /** Cancel job $1's active runs but $3, with reason $2; returns their ids. */
  cancelActive: namedStatement(
    'cancel_replaced_runs',
    `WITH cancelled AS (
       UPDATE ${t.runs} r SET state = 'cancelled', finished_at = now(), error = $2
       FROM ${t.openRuns} o
       WHERE o.job = $1 AND r.id = o.run_id AND r.state IN ${ACTIVE_SQL} AND r.id <> ALL($3::bigint[])
       RETURNING r.id, r.attempts, r.claim_token, r.claimed_by, r.claimed_at),
     attempts AS (${cancelledAttempts(t, 'cancelled', '$2')})
     SELECT id FROM cancelled`,
  ),
}));

/**
 * Commit a batch of fires in one transaction under the leader's fence. For each inserted fire
 * marked `replace`, the job's other active runs are cancelled in the same transaction (so only a
 * leader the fence accepted can cancel, and only with a fire that is really new); their ids are
 * returned in `cancelled`. `missed`: the plan's missed ranges, recorded in the same transaction
 * after the fence (a commit of no fires but missed ranges still advances the fence). `stillLeading`
 * is checked after the writes and just before COMMIT: past the local deadline we roll back instead
 * of committing (and nothing is cancelled or recorded).
 */
export async function commitFires(
  pool: pg.Pool,
  t: Tables,
  requested: FireRequest[],
  leader: LeaderStamp,
  missed: readonly MissedRangeRecord[],
  fenceIdleLimitMs: number,
): Promise<FireBatchResult> {
  if (requested.length === 0 && missed.length === 0) return noFires();
  return withTransaction(
    pool,
    async (client, rollback) => {
      // Runtime schedule fires are checked against the version in effect first (none: no round trip).
      const fires = inLockOrder(await currentScheduleVersions(client, t, requested));
      const inserted = await fenceAndInsert(client, t, fires, leader);
      const cancelled = await cancelReplaced(client, t, fires, inserted);
      const { rows, held } = await coalesceSkipped(client, t, fires, inserted);
      await recordMissedRanges(client, t, missed, leader);
      if (!leader.stillLeading()) {
        await rollback();
        return noFires();
      }
      return withOutdated(batchResult(withHeld(fires, held), rows, cancelled), requested.length, fires.length);
    },
    fenceHoldLimit(fenceIdleLimitMs),
  );
}

/** The fires inserted; StaleTokenError when the fence refused the token (nothing was written). */
async function fenceAndInsert(
  client: pg.PoolClient,
  t: Tables,
  fires: FireRequest[],
  leader: LeaderStamp,
): Promise<InsertedFire[]> {
  const res = await client.query<{ fenced: boolean; runs: InsertedRow[] | null }>({
    ...statements(t).fenceAndInsert,
    values: [fireRecords(fires), leader.token.toString(), leader.replicaId, leader.fenceResource],
  });
  const row = res.rows[0]!;
  if (!row.fenced)
    throw new StaleTokenError(leader.fenceResource, leader.token, await fenceToken(client, t, leader.fenceResource));
  return insertedFires(row.runs);
}

/**
 * Overlap 'replace': for each job with an inserted fire marked `replace`, cancel its other active
 * runs, naming the newest such fire. Only ever inside commitFires, after the fence.
 */
async function cancelReplaced(
  client: pg.PoolClient,
  t: Tables,
  fires: FireRequest[],
  inserted: InsertedFire[],
): Promise<bigint[]> {
  const insertedSlots = new Set(inserted.map(slotKey));
  const replacedBy = new Map<string, Date>(); // job → its newest inserted 'replace' fire
  for (const f of fires) {
    if (!f.replace || !insertedSlots.has(slotKey(f))) continue;
    const prev = replacedBy.get(f.job);
    if (!prev || prev < f.scheduledAt) replacedBy.set(f.job, f.scheduledAt);
  }
  const keep = inserted.map((r) => r.runId.toString());
  const cancelled: bigint[] = [];
  for (const [job, at] of replacedBy) {
    const res = await client.query<{ id: string }>({
      ...statements(t).cancelActive,
      values: [job, `replaced by the fire of ${at.toISOString()}`, keep],
    });
    cancelled.push(...res.rows.map((r) => BigInt(r.id)));
  }
  return cancelled;
}
