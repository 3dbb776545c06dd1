/** cw_members: one row per live replica, kept by its heartbeat, read by the admin API. */
import type { Tables } from '../db/tables.js';
import type { Queryable } from './transaction.js';
import type { WitnessedClaim } from './commit-witness.js';
import { namedStatement, perSchema } from './named-statement.js';

export interface MemberRecord {
  replicaId: string;
  host: string;
  pid: number;
  version: string;
  role: string;
  adminUrl: string | null;
  /** The names of the jobs it defines: a list, or already joined by newlines (see upsertMember). */
  jobs: readonly string[] | JoinedJobNames;
}

/** Job names joined by '\n' (none may hold one): a million names join in slices, off the hot path. */
export interface JoinedJobNames {
  joined: string;
}

/**
 * Insert or refresh this replica's row; last_seen on the database clock. The job names travel as
 * one newline-separated text and are split and sorted by the server: pg's array parameter takes
 * about a second of the event loop for a million names, a join takes milliseconds. (Job names
 * cannot hold a newline; sorted in "C" order, the order of JavaScript's sort for them.)
 */
export async function upsertMember(db: Queryable, t: Tables, m: MemberRecord): Promise<void> {
  const joined = 'joined' in m.jobs ? m.jobs.joined : joinNames(m.jobs);
  const list = joined === null ? [...(m.jobs as readonly string[])].sort() : null;
  await db.query(
    `INSERT INTO ${t.members} (replica_id, host, pid, version, role, admin_url, jobs, started_at, last_seen)
     VALUES ($1, $2, $3, $4, $5, $6,
       ${list ? '$7::text[]' : `ARRAY(SELECT j FROM unnest(string_to_array($7::text, E'\\n')) AS j ORDER BY j COLLATE "C")`},
       now(), now())
     ON CONFLICT (replica_id) DO UPDATE SET host = EXCLUDED.host, pid = EXCLUDED.pid, version = EXCLUDED.version,
       role = EXCLUDED.role, admin_url = EXCLUDED.admin_url, jobs = EXCLUDED.jobs, last_seen = now()`,
    [m.replicaId, m.host, m.pid, m.version, m.role, m.adminUrl, list ?? joined],
  );
}

/** The names joined by '\n', or null if one holds a newline (then they go as an array). */
function joinNames(names: readonly string[]): string | null {
  return names.some((j) => j.includes('\n')) ? null : names.join('\n');
}

/**
 * Refresh the row a full upsert wrote (role, admin URL, last_seen), leaving the rest, its job list
 * above all (a million names is megabytes), as it is. False when the row is gone: upsert it.
 */
export async function touchMember(
  db: Queryable,
  t: Tables,
  m: Pick<MemberRecord, 'replicaId' | 'role' | 'adminUrl'>,
): Promise<boolean> {
  const res = await db.query(
    `UPDATE ${t.members} SET role = $2, admin_url = $3, last_seen = now() WHERE replica_id = $1`,
    [m.replicaId, m.role, m.adminUrl],
  );
  return res.rowCount === 1;
}

export async function deleteMember(db: Queryable, t: Tables, replicaId: string): Promise<void> {
  await db.query(`DELETE FROM ${t.members} WHERE replica_id = $1`, [replicaId]);
}

/** Jobs defined by at least one member seen within `withinMs`; null when no member has said (a 0.1.0 replica, or none alive). */
export async function jobsOfLiveMembers(db: Queryable, t: Tables, withinMs: number): Promise<Set<string> | null> {
  const res = await db.query<{ jobs: string[] | null }>(
    `SELECT jobs FROM ${t.members} WHERE last_seen > now() - ($1::int * interval '1 millisecond')`,
    [withinMs],
  );
  if (res.rows.length === 0 || res.rows.some((r) => r.jobs === null)) return null;
  return new Set(res.rows.flatMap((r) => r.jobs ?? []));
}

/** How often a replica beats its member row, unless its leadership is sharded (then more often). */
export const MEMBER_BEAT_MS = 3000;

/** A member row's id and role, and how long ago (database clock) it last beat. */
export interface LiveMember {
  replicaId: string;
  role: string;
  ageMs: number;
}

/** Every replica seen within `withinMs`, by id, with the age of its last beat. */
export async function liveMembers(db: Queryable, t: Tables, withinMs: number): Promise<LiveMember[]> {
  const res = await db.query<{ replica_id: string; role: string; age_ms: number }>(
    `SELECT replica_id, role, (extract(epoch FROM now() - last_seen) * 1000)::float8 AS age_ms FROM ${t.members}
     WHERE last_seen > now() - ($1::int * interval '1 millisecond') ORDER BY replica_id`,
    [withinMs],
  );
  return res.rows.map((r) => ({ replicaId: r.replica_id, role: r.role, ageMs: Number(r.age_ms) }));
}

/** The heartbeat's question, prepared once per connection: it is asked every few seconds. */
const lostClaimsStatement = perSchema((t) =>
  namedStatement(
    'find_lost_claims',
    `WITH seen AS (
       SELECT * FROM unnest($2::bigint[], $3::int[], $4::bigint[], $5::text[], $6::timestamptz[], $7::timestamptz[], $8::bool[])
         AS s(run_id, attempt, token, job, scheduled_at, claimed_at, finished)
       WHERE claimed_at > now() - interval '1 hour'),
     lost AS (
       SELECT s.* FROM seen s
       WHERE NOT EXISTS (SELECT 1 FROM ${t.runs} r
         WHERE r.id = s.run_id AND (s.job IS NULL OR (r.job = s.job AND r.scheduled_at = s.scheduled_at))
           AND (EXISTS (SELECT 1 FROM ${t.runAttempts} a
                 WHERE a.run_id = r.id AND a.attempt = s.attempt AND a.token = s.token
                   AND (NOT s.finished OR a.finished_at IS NOT NULL))
             OR (NOT s.finished AND r.claim_token = s.token AND r.attempts = s.attempt)))),
     noted AS (
       UPDATE ${t.members} SET lost_writes = lost_writes + (SELECT count(*) FROM lost), lost_writes_at = now(),
         lost_write_example = COALESCE(lost_write_example, (
           SELECT CASE WHEN finished THEN 'outcome of run ' || run_id
             ELSE 'claim of run ' || run_id || ' (' || job || ' at ' || to_char(scheduled_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"') || ')' END
             || ', attempt ' || attempt || ', token ' || token FROM lost ORDER BY token, finished LIMIT 1))
       WHERE replica_id = $1 AND EXISTS (SELECT 1 FROM lost) RETURNING 1)
     SELECT run_id, attempt, token, job, scheduled_at, claimed_at, finished FROM lost`,
  ),
);

/**
 * Of the claims and outcomes this replica saw commit (commit-witness.ts), those the ledger no
 * longer has: no attempt row with that token nor the run still on it (a running attempt's row is
 * written when it ends, attempt-rows.ts), its run now another slot (a run id issued again
 * after a lossy failover), or, for an outcome, the attempt not finished. Counted on the member row (lost_writes, when, the first in words) in the same
 * statement, for the ledger check to report. Claims an hour old or older are not asked about:
 * only retention deletes runs, and never one less than a day old.
 */
export async function findLostClaims(
  db: Queryable,
  t: Tables,
  replicaId: string,
  claims: readonly WitnessedClaim[],
): Promise<WitnessedClaim[]> {
  if (claims.length === 0) return [];
  const res = await db.query<{
    run_id: string;
    attempt: number;
    token: string;
    job: string | null;
    scheduled_at: Date | null;
    claimed_at: Date;
    finished: boolean;
  }>({
    ...lostClaimsStatement(t),
    values: [
      replicaId,
      claims.map((c) => c.runId.toString()),
      claims.map((c) => c.attempt),
      claims.map((c) => c.token.toString()),
      claims.map((c) => c.job),
      claims.map((c) => c.scheduledAt),
      claims.map((c) => c.claimedAt),
      claims.map((c) => c.finished === true),
    ],
  });
  return res.rows.map((r) => ({
    runId: BigInt(r.run_id),
    attempt: r.attempt,
    token: BigInt(r.token),
    job: r.job,
    scheduledAt: r.scheduled_at,
    claimedAt: r.claimed_at,
    finished: r.finished,
  }));
}

/** Members whose heartbeat found lost claims since `sinceMs` ago. */
export interface LostWritesReport {
  replicaId: string;
  lostWrites: number;
  lostWritesAt: Date;
  example: string | null;
}

export async function membersWithLostWrites(db: Queryable, t: Tables, sinceMs: number): Promise<LostWritesReport[]> {
  const res = await db.query<{ replica_id: string; lost_writes: number; lost_writes_at: Date; example: string | null }>(
    `SELECT replica_id, lost_writes, lost_writes_at, lost_write_example AS example FROM ${t.members}
     WHERE lost_writes > 0 AND lost_writes_at > now() - ($1::bigint * interval '1 millisecond') ORDER BY replica_id`,
    [Math.floor(sinceMs)],
  );
  return res.rows.map((r) => ({
    replicaId: r.replica_id,
    lostWrites: r.lost_writes,
    lostWritesAt: r.lost_writes_at,
    example: r.example,
  }));
}
