/**
 * Missed instants as ranges (cw_missed_ranges): written by the leader inside the transaction that
 * commits its catch-up's fires, after the fence accepted its token, so a stale leader records no
 * missed range and a missed range never exists without the fires of the same plan. Keyed by
 * (job, reason, first instant): a retried commit, or a later leader planning from the same last
 * fire, extends the range (its last instant, count and deciding tenure) instead of adding one.
 */
import type { MissedReason } from '../cron/occurrence-reasons.js';
import type { Tables } from '../db/tables.js';
import { namedStatement, perSchema } from './named-statement.js';
import type { Queryable } from './transaction.js';

export interface MissedRangeRecord {
  job: string;
  firstAt: Date;
  lastAt: Date;
  count: number;
  exact: boolean;
  reason: MissedReason;
  /** The last instant handled before the outage (null: none). */
  outageStart: Date | null;
  /** When the deciding leader planned (a tenure's start, or the late tick). */
  outageEnd: Date;
}

const statements = perSchema((t) => ({
  /** $1 ranges (JSON), $2 leader token, $3 replica id. In key order, so two writers lock alike. */
  record: namedStatement(
    'record_missed_ranges',
    `INSERT INTO ${t.missedRanges} AS m (job, first_at, last_at, count, count_exact, reason, outage_start, outage_end,
       leader_token, leader_id)
     SELECT r.job, r.first_at, r.last_at, r.count, r.count_exact, r.reason, r.outage_start, r.outage_end, $2, $3
     FROM jsonb_to_recordset($1::jsonb) AS r(job text, first_at timestamptz, last_at timestamptz, count bigint,
       count_exact boolean, reason text, outage_start timestamptz, outage_end timestamptz)
     ORDER BY r.job, r.reason, r.first_at
     ON CONFLICT (job, reason, first_at) DO UPDATE SET
       last_at = GREATEST(m.last_at, EXCLUDED.last_at),
       count = GREATEST(m.count, EXCLUDED.count),
       count_exact = CASE WHEN EXCLUDED.count >= m.count THEN EXCLUDED.count_exact ELSE m.count_exact END,
       outage_end = GREATEST(m.outage_end, EXCLUDED.outage_end),
       leader_token = GREATEST(m.leader_token, EXCLUDED.leader_token),
       leader_id = CASE WHEN EXCLUDED.leader_token >= m.leader_token THEN EXCLUDED.leader_id ELSE m.leader_id END`,
  ),
}));

/** Record `ranges` for the leader (inside its fenced commit). */
export async function recordMissedRanges(
  db: Queryable,
  t: Tables,
  ranges: readonly MissedRangeRecord[],
  leader: { token: bigint; replicaId: string },
): Promise<void> {
  if (ranges.length === 0) return;
  const json = JSON.stringify(
    ranges.map((r) => ({
      job: r.job,
      first_at: r.firstAt.toISOString(),
      last_at: r.lastAt.toISOString(),
      count: r.count,
      count_exact: r.exact,
      reason: r.reason,
      outage_start: r.outageStart?.toISOString() ?? null,
      outage_end: r.outageEnd.toISOString(),
    })),
  );
  await db.query({ ...statements(t).record, values: [json, leader.token.toString(), leader.replicaId] });
}
