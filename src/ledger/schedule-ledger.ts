/**
 * Runtime schedules in the ledger: the current row per schedule (cw_schedules), every change kept
 * as a version (cw_schedule_versions: who, when, before, after), a NOTIFY on this schema's channel
 * in the same transaction as each change, and the check the leader's fire commit makes against
 * them.
 *
 * The boundary rule. A change takes effect at its `effective_at`, read from the database clock
 * after the change has locked the schedule's row. A slot at instant T belongs to the version in
 * effect at T: the newest version with effective_at <= T. A fire commits only if it names that
 * version and that version neither pauses nor deletes the schedule. The fire's transaction holds
 * the schedule rows FOR SHARE, so a change waits for it and its effective_at falls after that
 * commit: a slot the leader committed under the old version is never at or after the new
 * version's effective_at. So: slots before the change follow the old version (fired once, late
 * if the leader was away), slots at or after it follow the new one, and the unique (job,
 * scheduled_at) key keeps any slot from firing twice.
 */
import type pg from 'pg';
import { ScheduleExistsError, ScheduleNotFoundError } from '../errors.js';
import { advanceFence } from './fences.js';
import { fenceHoldLimit, withTransaction, type Queryable } from './transaction.js';
import type { Tables } from '../db/tables.js';
import type { OverlapPolicy } from '../cron/scheduled-job.js';
import { DEFAULT_LEASE_TTL_MS, type LeaderStamp } from './commit-stamps.js';

/** What a runtime schedule says: which handler, when, with which policies and payload. */
export interface ScheduleSpec {
  handler: string;
  cron: string;
  timezone: string;
  misfire: 'all' | 'latest' | 'skip';
  overlap: OverlapPolicy;
  catchUpWindowMs: number;
  misfireGraceMs: number;
  payload: unknown;
  paused: boolean;
}

export interface StoredSchedule extends ScheduleSpec {
  id: string;
  version: number;
  /** When the current version took effect. */
  updatedAt: Date;
  createdAt: Date;
  deletedAt: Date | null;
}

export type ScheduleAction = 'create' | 'update' | 'pause' | 'resume' | 'delete';

export interface ScheduleVersion {
  scheduleId: string;
  version: number;
  action: ScheduleAction;
  /** The admin token's name, or "admin". */
  actor: string;
  effectiveAt: Date;
  before: ScheduleSpec | null;
  /** null: deleted from this instant on. */
  after: ScheduleSpec | null;
}

/** A one-off run asked for by a caller, and whether this call made it. */
export interface OnceRun {
  runId: bigint;
  job: string;
  scheduledAt: Date;
  state: string;
  created: boolean;
}

/** A fire of a runtime schedule, as the commit checks it. */
export interface ScheduleFireCheck {
  scheduleId: string;
  version: number;
  scheduledAt: Date;
}

interface ScheduleRow {
  id: string;
  handler: string;
  cron: string;
  timezone: string;
  misfire: ScheduleSpec['misfire'];
  overlap: ScheduleSpec['overlap'];
  catch_up_window_ms: number;
  misfire_grace_ms: number;
  payload: unknown;
  paused: boolean;
  version: number;
  updated_at: Date;
  created_at: Date;
  deleted_at: Date | null;
}

const COLUMNS = `id, handler, cron, timezone, misfire, overlap, catch_up_window_ms, misfire_grace_ms, payload, paused,
  version, updated_at, created_at, deleted_at`;

export class ScheduleLedger {
  /** How long a one-off run's commit, holding the scheduler's fence, may sit idle (fenceHoldLimit). */
  fenceIdleLimitMs = DEFAULT_LEASE_TTL_MS;

  constructor(
    private readonly pool: pg.Pool,
    private readonly t: Tables,
  ) {}

  /** Create a schedule (or bring back a deleted one under its id, as a new version). */
  create(id: string, spec: ScheduleSpec, actor: string): Promise<StoredSchedule> {
    return withTransaction(this.pool, async (client) => {
      await client.query(
        `INSERT INTO ${this.t.schedules} (id, handler, cron, timezone, misfire, overlap, catch_up_window_ms,
           misfire_grace_ms, payload, paused, version, deleted_at)
         VALUES ($1, '', '', 'UTC', 'all', 'allow', 0, 0, NULL, false, 0, clock_timestamp())
         ON CONFLICT (id) DO NOTHING`,
        [id],
      );
      const current = await this.lockRow(client, id);
      if (current && current.deleted_at === null) throw new ScheduleExistsError(id);
      return this.write(client, current!, 'create', spec, actor);
    });
  }

  /** Replace a schedule's spec (update, pause, resume): a new version, effective now. */
  change(
    id: string,
    action: Exclude<ScheduleAction, 'create' | 'delete'>,
    edit: (before: ScheduleSpec) => ScheduleSpec,
    actor: string,
  ): Promise<StoredSchedule> {
    return withTransaction(this.pool, async (client) => {
      const current = await this.lockRow(client, id);
      if (!current || current.deleted_at !== null) throw new ScheduleNotFoundError(id);
      return this.write(client, current, action, edit(specOf(current)), actor);
    });
  }

  delete(id: string, actor: string): Promise<StoredSchedule> {
    return withTransaction(this.pool, async (client) => {
      const current = await this.lockRow(client, id);
      if (!current || current.deleted_at !== null) throw new ScheduleNotFoundError(id);
      return this.write(client, current, 'delete', null, actor);
    });
  }

  private async lockRow(client: pg.PoolClient, id: string): Promise<ScheduleRow | undefined> {
    const res = await client.query<ScheduleRow>(`SELECT ${COLUMNS} FROM ${this.t.schedules} WHERE id = $1 FOR UPDATE`, [
      id,
    ]);
    return res.rows[0];
  }

  /**
   * Write the new version under the row lock: effective_at is read from the clock only now, after
   * any fire commit holding the row FOR SHARE has finished (the boundary rule above).
   */
  private async write(
    client: pg.PoolClient,
    current: ScheduleRow,
    action: ScheduleAction,
    after: ScheduleSpec | null,
    actor: string,
  ): Promise<StoredSchedule> {
    const before = current.version === 0 || current.deleted_at !== null ? null : specOf(current);
    const s = after ?? specOf(current);
    const res = await client.query<ScheduleRow>(
      // Whole milliseconds (the scheduler's unit), rounded up: still after the lock was taken.
      `UPDATE ${this.t.schedules} SET handler = $2, cron = $3, timezone = $4, misfire = $5, overlap = $6,
         catch_up_window_ms = $7, misfire_grace_ms = $8, payload = $9::jsonb, paused = $10, version = version + 1,
         updated_at = c.at, deleted_at = CASE WHEN $11 THEN c.at END
       FROM (SELECT date_trunc('milliseconds', clock_timestamp()) + interval '1 millisecond' AS at) c
       WHERE id = $1 RETURNING ${COLUMNS}`,
      [
        current.id,
        s.handler,
        s.cron,
        s.timezone,
        s.misfire,
        s.overlap,
        s.catchUpWindowMs,
        s.misfireGraceMs,
        JSON.stringify(s.payload ?? null),
        s.paused,
        after === null,
      ],
    );
    const row = res.rows[0]!;
    await client.query(
      `INSERT INTO ${this.t.scheduleVersions} (schedule_id, version, action, actor, effective_at, before, after)
       VALUES ($1, $2, $3, $4, $5, $6::jsonb, $7::jsonb)`,
      [row.id, row.version, action, actor, row.updated_at, JSON.stringify(before), JSON.stringify(after)],
    );
    // Delivered at COMMIT, so the leader never reads a change that did not happen.
    await client.query('SELECT pg_notify($1, $2)', [this.t.scheduleChannel, `${row.id} ${row.version}`]);
    return toStored(row);
  }

  /**
   * Create many schedules in one transaction (an import, the benchmark): each a version 1 with its
   * version row, one NOTIFY per call ("*": the leader reconciles). Ids already in use are left
   * alone. Returns how many were created. The specs must have been validated (validateSchedule).
   */
  importMany(items: { id: string; spec: ScheduleSpec }[], actor: string): Promise<number> {
    if (items.length === 0) return Promise.resolve(0);
    return withTransaction(this.pool, async (client) => {
      const rows = JSON.stringify(items.map(({ id, spec }) => ({ id, ...toColumns(spec) })));
      const res = await client.query<{ id: string; updated_at: Date }>(
        `INSERT INTO ${this.t.schedules} (id, handler, cron, timezone, misfire, overlap, catch_up_window_ms,
           misfire_grace_ms, payload, paused, version, updated_at)
         SELECT f.id, f.handler, f.cron, f.timezone, f.misfire, f.overlap, f.catch_up_window_ms, f.misfire_grace_ms,
                f.payload, f.paused, 1, date_trunc('milliseconds', clock_timestamp()) + interval '1 millisecond'
         FROM jsonb_to_recordset($1::jsonb) AS f(id text, handler text, cron text, timezone text, misfire text,
           overlap text, catch_up_window_ms int, misfire_grace_ms int, payload jsonb, paused boolean)
         ON CONFLICT (id) DO NOTHING RETURNING id, updated_at`,
        [rows],
      );
      await client.query(
        `INSERT INTO ${this.t.scheduleVersions} (schedule_id, version, action, actor, effective_at, before, after)
         SELECT s.id, 1, 'create', $2, s.updated_at, 'null'::jsonb, to_jsonb(f.spec)
         FROM ${this.t.schedules} s JOIN jsonb_to_recordset($1::jsonb) AS f(id text, spec jsonb) ON f.id = s.id
         WHERE s.id = ANY($3::text[])`,
        [JSON.stringify(items.map(({ id, spec }) => ({ id, spec }))), actor, res.rows.map((r) => r.id)],
      );
      await client.query('SELECT pg_notify($1, $2)', [this.t.scheduleChannel, '* 0']);
      return res.rowCount ?? 0;
    });
  }

  async get(id: string, db: Queryable = this.pool): Promise<StoredSchedule | undefined> {
    const res = await db.query<ScheduleRow>(`SELECT ${COLUMNS} FROM ${this.t.schedules} WHERE id = $1`, [id]);
    const row = res.rows[0];
    return row && row.version > 0 ? toStored(row) : undefined;
  }

  /** Schedules, by id, those after `after` only (keyset paging); deleted ones only when asked. */
  async list(
    o: { handler?: string; includeDeleted?: boolean; limit?: number; after?: string } = {},
  ): Promise<StoredSchedule[]> {
    const res = await this.pool.query<ScheduleRow>(
      `SELECT ${COLUMNS} FROM ${this.t.schedules}
       WHERE version > 0 AND ($1::text IS NULL OR handler = $1) AND ($2 OR deleted_at IS NULL)
         AND ($4::text IS NULL OR id > $4)
       ORDER BY id LIMIT $3`,
      [o.handler ?? null, o.includeDeleted ?? false, o.limit ?? 1000, o.after ?? null],
    );
    return res.rows.map(toStored);
  }

  /** Every version of one schedule, oldest first. */
  async versions(id: string): Promise<ScheduleVersion[]> {
    const res = await this.pool.query<VersionRow>(
      `SELECT schedule_id, version, action, actor, effective_at, before, after FROM ${this.t.scheduleVersions}
       WHERE schedule_id = $1 ORDER BY version`,
      [id],
    );
    return res.rows.map(toVersion);
  }

  /**
   * The versions whose time in effect reaches past `since` (the current one of each schedule, and
   * any that ended after `since`): what the leader needs to plan every slot from `since` on.
   * `ids` limits it to some schedules (a notification); omit it to load them all.
   */
  async versionsInEffect(since: Date, ids?: string[]): Promise<ScheduleVersion[]> {
    const res = await this.pool.query<VersionRow>(
      `SELECT schedule_id, version, action, actor, effective_at, before, after FROM (
         SELECT v.*, lead(v.effective_at) OVER (PARTITION BY v.schedule_id ORDER BY v.version) AS until
         FROM ${this.t.scheduleVersions} v WHERE $2::text[] IS NULL OR v.schedule_id = ANY($2::text[])) x
       WHERE until IS NULL OR until > $1
       ORDER BY schedule_id, version`,
      [since, ids ?? null],
    );
    return res.rows.map(toVersion);
  }

  /** Each schedule's current version: the reconcile compares it with what the leader holds. */
  async currentVersions(): Promise<Map<string, number>> {
    const res = await this.pool.query<{ id: string; version: number }>(
      `SELECT id, version FROM ${this.t.schedules} WHERE version > 0`,
    );
    return new Map(res.rows.map((r) => [r.id, r.version]));
  }

  /** Changes whenever any schedule changes (versions only grow): the reconcile's cheap first look. */
  async fingerprint(): Promise<string> {
    const res = await this.pool.query<{ f: string }>(
      `SELECT count(*)::text || ':' || COALESCE(sum(version), 0)::text AS f FROM ${this.t.schedules}`,
    );
    return res.rows[0]!.f;
  }

  /**
   * A one-off run of `job` at `at`, once per `key`: committed under the leader's fence; a second
   * call with the same key returns the first run (created: false) whatever its instant or payload.
   */
  commitOnce(
    o: { job: string; at: Date; key: string; payload: unknown },
    leader: LeaderStamp,
  ): Promise<OnceRun | undefined> {
    return withTransaction(
      this.pool,
      async (client, rollback) => {
        await advanceFence(client, this.t, leader.fenceResource, leader.token);
        const inserted = await client.query<{ id: string; scheduled_at: Date; state: string }>(
          `INSERT INTO ${this.t.runs} (job, scheduled_at, trigger, leader_token, leader_id, payload, once_key)
         VALUES ($1, $2, 'once', $3, $4, $5::jsonb, $6)
         ON CONFLICT (job, once_key) WHERE once_key IS NOT NULL DO NOTHING
         RETURNING id, scheduled_at, state`,
          [o.job, o.at, leader.token.toString(), leader.replicaId, JSON.stringify(o.payload ?? null), o.key],
        );
        const row = inserted.rows[0];
        if (row && !leader.stillLeading()) {
          await rollback();
          return undefined;
        }
        if (row)
          return { runId: BigInt(row.id), job: o.job, scheduledAt: row.scheduled_at, state: row.state, created: true };
        const found = await client.query<{ id: string; scheduled_at: Date; state: string }>(
          `SELECT id, scheduled_at, state FROM ${this.t.runs} WHERE job = $1 AND once_key = $2`,
          [o.job, o.key],
        );
        const first = found.rows[0]!;
        return {
          runId: BigInt(first.id),
          job: o.job,
          scheduledAt: first.scheduled_at,
          state: first.state,
          created: false,
        };
      },
      fenceHoldLimit(this.fenceIdleLimitMs),
    );
  }
}

/**
 * Inside the leader's fire commit: hold the schedules FOR SHARE (a change waits for this commit),
 * then keep the fires whose named version is the one in effect at their instant and neither
 * pauses nor deletes the schedule. Returns the indexes of the fires accepted.
 */
export async function acceptScheduleFires(
  client: pg.PoolClient,
  t: Tables,
  fires: ScheduleFireCheck[],
): Promise<Set<number>> {
  if (fires.length === 0) return new Set();
  const ids = [...new Set(fires.map((f) => f.scheduleId))].sort();
  await client.query(`SELECT id FROM ${t.schedules} WHERE id = ANY($1::text[]) ORDER BY id FOR SHARE`, [ids]);
  const res = await client.query<{ i: number }>(
    `SELECT f.i FROM jsonb_to_recordset($1::jsonb) AS f(i int, schedule_id text, scheduled_at timestamptz, version int)
     CROSS JOIN LATERAL (
       SELECT v.version, v.after FROM ${t.scheduleVersions} v
       WHERE v.schedule_id = f.schedule_id AND v.effective_at <= f.scheduled_at
       ORDER BY v.version DESC LIMIT 1) cur
     WHERE cur.version = f.version AND cur.after IS NOT NULL AND cur.after <> 'null'::jsonb
       AND NOT COALESCE((cur.after->>'paused')::boolean, false)`,
    [
      JSON.stringify(
        fires.map((f, i) => ({
          i,
          schedule_id: f.scheduleId,
          scheduled_at: f.scheduledAt.toISOString(),
          version: f.version,
        })),
      ),
    ],
  );
  return new Set(res.rows.map((r) => r.i));
}

interface VersionRow {
  schedule_id: string;
  version: number;
  action: ScheduleAction;
  actor: string;
  effective_at: Date;
  before: ScheduleSpec | null;
  after: ScheduleSpec | null;
}

function toVersion(r: VersionRow): ScheduleVersion {
  return {
    scheduleId: r.schedule_id,
    version: r.version,
    action: r.action,
    actor: r.actor,
    effectiveAt: r.effective_at,
    before: r.before,
    after: r.after,
  };
}

function toColumns(s: ScheduleSpec) {
  return {
    handler: s.handler,
    cron: s.cron,
    timezone: s.timezone,
    misfire: s.misfire,
    overlap: s.overlap,
    catch_up_window_ms: s.catchUpWindowMs,
    misfire_grace_ms: s.misfireGraceMs,
    payload: s.payload ?? null,
    paused: s.paused,
  };
}

function specOf(r: ScheduleRow): ScheduleSpec {
  return {
    handler: r.handler,
    cron: r.cron,
    timezone: r.timezone,
    misfire: r.misfire,
    overlap: r.overlap,
    catchUpWindowMs: r.catch_up_window_ms,
    misfireGraceMs: r.misfire_grace_ms,
    payload: r.payload,
    paused: r.paused,
  };
}

function toStored(r: ScheduleRow): StoredSchedule {
  return {
    id: r.id,
    ...specOf(r),
    version: r.version,
    updatedAt: r.updated_at,
    createdAt: r.created_at,
    deletedAt: r.deleted_at,
  };
}
