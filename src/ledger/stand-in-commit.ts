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
import type { Tables } from '../db/tables.js';
import type { StandInStamp } from './commit-stamps.js';
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
  withHeld,
  withOutdated,
  type FireBatchResult,
  type FireRequest,
  type InsertedRow,
} from './fire-batch.js';
import { coalesceSkipped } from './coalesced-fires.js';
import { namedStatement, perSchema } from './named-statement.js';
import { fenceHoldLimit, withTransaction } from './transaction.js';

const statements = perSchema((t) => ({
  /**
   * One round trip: the fence $2's token, share-locked until COMMIT, and under it (none: nothing)
   * fires $1 (fireRecords, in lock order) of replica $3 inserted as the leader's commit inserts them
   * (insertFireRunsCtes), and each job's last scheduled fire moved forward (advanceJobStateCte).
   */
  fenceSharedAndInsert: namedStatement(
    'stand_in_fence_and_insert',
    `WITH fence AS (SELECT token FROM ${t.fences} WHERE resource = $2 FOR SHARE),
     ${FIRE_RECORDS_CTE},
     ${insertFireRunsCtes(t, 'EXISTS (SELECT 1 FROM fence)', '(SELECT token FROM fence)')},
     ${advanceJobStateCte(t, 'EXISTS (SELECT 1 FROM fence)')}
     SELECT EXISTS (SELECT 1 FROM fence) AS fenced, ${INSERTED_JSON} AS runs`,
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
      const res = await client.query<{ fenced: boolean; runs: InsertedRow[] | null }>({
        ...s.fenceSharedAndInsert,
        values: [fireRecords(accepted), standIn.fenceResource, standIn.replicaId],
      });
      const row = res.rows[0]!;
      if (!row.fenced) return noFires();
      const { rows, held } = await coalesceSkipped(client, t, accepted, insertedFires(row.runs));
      return withOutdated(batchResult(withHeld(accepted, held), rows, []), candidates.length, accepted.length);
    },
    fenceHoldLimit(fenceIdleLimitMs),
  );
}
