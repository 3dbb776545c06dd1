/**
 * Schedule eras (cw_schedule_eras): the schedule each job's due instants are accounted under, from
 * the instant it took effect. A leader opens eras when it starts leading (and when runtime
 * schedules change), only for jobs whose schedule differs from their open era's or that have none:
 * rare writes, never one per fire. Opening closes the job's open era at the new one's start, under
 * the scheduler's fence (a stale leader, say an older code version's, cannot flip an era back);
 * an era whose schedule is the open one's already is not opened again.
 */
import type pg from 'pg';
import { sameSchedule, type ScheduleIdentity } from '../cron/schedule-era.js';
import { StaleTokenError } from '../errors.js';
import type { Tables } from '../db/tables.js';
import { fenceToken } from './fences.js';
import { namedStatement, perSchema } from './named-statement.js';
import { fenceHoldLimit, withTransaction, type Queryable } from './transaction.js';

export interface OpenEra extends ScheduleIdentity {
  job: string;
  /** Instants after this are accounted under the era's schedule. */
  from: Date;
}

export interface ScheduleEra extends OpenEra {
  /** The next era's start; null while current. */
  to: Date | null;
  leaderToken: bigint;
  leaderId: string;
}

/** Eras written per statement. */
const ERA_CHUNK = 5_000;

const statements = perSchema((t) => ({
  open: namedStatement(
    'open_schedule_eras',
    `SELECT job, expression, timezone, dst, from_at FROM ${t.scheduleEras} WHERE to_at IS NULL`,
  ),
  openOf: namedStatement(
    'open_schedule_eras_of',
    `SELECT job, expression, timezone, dst, from_at FROM ${t.scheduleEras} WHERE to_at IS NULL AND job = ANY($1::text[])`,
  ),
  fence: namedStatement(
    'schedule_eras_fence',
    `SELECT token FROM ${t.fences} WHERE resource = $1 AND token <= $2 FOR SHARE`,
  ),
  /** Close jobs $1's open eras at $2 (each job's new era's start). */
  close: namedStatement(
    'close_schedule_eras',
    `UPDATE ${t.scheduleEras} e SET to_at = GREATEST(e.from_at, c.at)
     FROM unnest($1::text[], $2::timestamptz[]) AS c(job, at)
     WHERE e.job = c.job AND e.to_at IS NULL`,
  ),
  insert: namedStatement(
    'insert_schedule_eras',
    `INSERT INTO ${t.scheduleEras} (job, expression, timezone, dst, from_at, leader_token, leader_id)
     SELECT e.job, e.expression, e.timezone, e.dst, e.from_at, $2, $3
     FROM jsonb_to_recordset($1::jsonb) AS e(job text, expression text, timezone text, dst text, from_at timestamptz)
     ORDER BY e.job`,
  ),
  /** Job $1's eras that overlap [$2, $3], oldest first. */
  overlapping: namedStatement(
    'schedule_eras_overlapping',
    `SELECT job, expression, timezone, dst, from_at, to_at, leader_token::text AS leader_token, leader_id
     FROM ${t.scheduleEras} WHERE job = $1 AND from_at <= $3 AND (to_at IS NULL OR to_at >= $2)
     ORDER BY from_at LIMIT 100`,
  ),
}));

type OpenRow = { job: string; expression: string; timezone: string; dst: string; from_at: Date };

/** The open era of every job (or of `jobs`), by job. */
export async function openEras(db: Queryable, t: Tables, jobs?: readonly string[]): Promise<Map<string, OpenEra>> {
  const res =
    jobs === undefined
      ? await db.query<OpenRow>({ ...statements(t).open, values: [] })
      : await db.query<OpenRow>({ ...statements(t).openOf, values: [[...jobs]] });
  return new Map(
    res.rows.map((r) => [
      r.job,
      { job: r.job, expression: r.expression, timezone: r.timezone, dst: r.dst, from: r.from_at },
    ]),
  );
}

/**
 * Open `eras` (closing each job's open era at the new one's start), under the leader's fence:
 * StaleTokenError, and nothing written, when a newer leader raised it.
 */
export async function openNewEras(
  pool: pg.Pool,
  t: Tables,
  eras: readonly OpenEra[],
  leader: { fenceResource: string; token: bigint; replicaId: string },
  fenceIdleLimitMs: number,
): Promise<void> {
  if (eras.length === 0) return;
  const sorted = [...eras].sort((a, b) => (a.job < b.job ? -1 : a.job > b.job ? 1 : 0));
  const s = statements(t);
  await withTransaction(
    pool,
    async (client) => {
      const fenced = await client.query({ ...s.fence, values: [leader.fenceResource, leader.token.toString()] });
      if (fenced.rowCount === 0)
        throw new StaleTokenError(
          leader.fenceResource,
          leader.token,
          await fenceToken(client, t, leader.fenceResource),
        );
      // In chunks: the first tenure after an upgrade opens an era for every job (a million of them).
      for (let i = 0; i < sorted.length; i += ERA_CHUNK) {
        // Read again under the fence: a leader that read the open eras before the one it succeeds
        // wrote its last (a schedule updated as the leadership changed) would otherwise open an era
        // of a schedule already open, and split one era in two.
        const asked = sorted.slice(i, i + ERA_CHUNK);
        const open = await openEras(
          client,
          t,
          asked.map((e) => e.job),
        );
        const chunk = asked.filter((e) => {
          const current = open.get(e.job);
          return !current || !sameSchedule(current, e);
        });
        if (chunk.length === 0) continue;
        await client.query({ ...s.close, values: [chunk.map((e) => e.job), chunk.map((e) => e.from)] });
        const json = JSON.stringify(
          chunk.map((e) => ({
            job: e.job,
            expression: e.expression,
            timezone: e.timezone,
            dst: e.dst,
            from_at: e.from.toISOString(),
          })),
        );
        await client.query({ ...s.insert, values: [json, leader.token.toString(), leader.replicaId] });
      }
    },
    fenceHoldLimit(fenceIdleLimitMs),
  );
}

/** Job `job`'s eras that overlap [from, to], oldest first (at most 100). */
export async function erasOverlapping(
  db: Queryable,
  t: Tables,
  job: string,
  from: Date,
  to: Date,
): Promise<ScheduleEra[]> {
  const res = await db.query<OpenRow & { to_at: Date | null; leader_token: string; leader_id: string }>({
    ...statements(t).overlapping,
    values: [job, from, to],
  });
  return res.rows.map((r) => ({
    job: r.job,
    expression: r.expression,
    timezone: r.timezone,
    dst: r.dst,
    from: r.from_at,
    to: r.to_at,
    leaderToken: BigInt(r.leader_token),
    leaderId: r.leader_id,
  }));
}
