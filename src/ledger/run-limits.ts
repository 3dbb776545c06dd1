/**
 * Concurrency limits across replicas and jobs. A key has `limit` slot rows. A claimed run takes one
 * before its handler starts (its claim token, its worker) and its worker releases it once the
 * handler returned. A slot is held while its run is running or its worker is alive and has not
 * released it, so:
 * - a worker killed mid-run cannot leak a slot: once its run is taken over, the new claim keeps the
 *   slot (its token moves onto it); once its run settled and it stopped beating, the slot is free;
 *   started again under its name (so it never stopped beating), it frees its earlier start's slots
 *   of runs that ended as it starts (releaseEarlierStart);
 * - the key never has more handlers running than slots, through a failover (a paused worker that
 *   resumes after its run was taken over is the exception: its writes are fenced, its code runs on).
 * A run that finds no free slot waits in the ledger (pending, its reason in `error`), in order:
 * a run never takes a slot while a run of its key of a higher priority, or as high and older,
 * waits for one.
 */
import type { Tables } from '../db/tables.js';
import { namedStatement, perSchema } from './named-statement.js';
import { withTransaction, type Queryable } from './transaction.js';
import { UNKNOWN_WORKER, writeOwnEndedAttempts } from './attempt-rows.js';
import type pg from 'pg';

/** A claimed run asking for a slot of `key` (at most `limit` runs at once). */
export interface SlotRequest {
  runId: bigint;
  token: bigint;
  attempt: number;
  key: string;
  limit: number;
  /** Among the runs waiting for a slot of the key, higher first (then older first). */
  priority: number;
}

/** A claimed attempt that goes back to wait in the ledger. */
export interface WaitingAttempt {
  runId: bigint;
  token: bigint;
  attempt: number;
}

/**
 * 'full': no slot for this run now. `wakeOlder`: a slot is free, but an older run of the key waits
 * for it: deliver that one (its delivery may have been lost).
 */
export type SlotResult = { status: 'held'; slot: number } | { status: 'full'; reason: string; wakeOlder: boolean };

/** A run that may be running, not yet released: its slot may be held (the sweep's test). */
const slotMayBeFree = (t: Tables) =>
  `(s.run_id IS NULL OR NOT EXISTS (SELECT 1 FROM ${t.runs} holder WHERE holder.id = s.run_id AND holder.state = 'running'))`;

/** SQL: slot row `s` is free: released, or its run is not running and its worker stopped beating (within $window ms). */
const slotIsFree = (t: Tables, window: string) =>
  `(s.run_id IS NULL OR (NOT EXISTS (SELECT 1 FROM ${t.runs} holder WHERE holder.id = s.run_id AND holder.state = 'running')
     AND NOT EXISTS (SELECT 1 FROM ${t.workers} w WHERE w.worker = s.worker
       AND w.beat_at > now() - ${window}::bigint * interval '1 millisecond')))`;

/**
 * SQL for the re-delivery sweep: run `r` is not waiting for a slot in vain. A pending run of a key
 * is handed over again only when it heads its key's waiters and a slot may be free (the wake-up
 * after the last slot freed was lost); otherwise the next run of its key to finish wakes it.
 */
export const mayDeliverSql = (t: Tables, r: string) =>
  `(${r}.limit_key IS NULL OR ${r}.state <> 'pending' OR (
     EXISTS (SELECT 1 FROM ${t.limitSlots} s WHERE s.key = ${r}.limit_key AND ${slotMayBeFree(t)})
     AND NOT EXISTS (SELECT 1 FROM ${t.runs} older WHERE older.open_limit_key = ${r}.limit_key
       AND older.state IN ('pending', 'retrying') AND (older.scheduled_at, older.id) < (${r}.scheduled_at, ${r}.id))))`;

const statements = perSchema((t) => ({
  /** Make sure key $1 has slots 0..$2-1 (a raised limit adds rows; a lowered one leaves the rest unused). */
  slots: namedStatement(
    'ensure_limit_slots',
    `INSERT INTO ${t.limitSlots} (key, slot) SELECT $1, s FROM generate_series(0, $2::int - 1) AS s
     ON CONFLICT (key, slot) DO NOTHING`,
  ),
  /** Run $1 (claim $2, on worker $5) keeps the slot of key $3 (below $4) it held: a takeover's new claim. */
  keep: namedStatement(
    'keep_limit_slot',
    `WITH run AS (UPDATE ${t.runs} SET limit_key = $3 WHERE id = $1 AND claim_token = $2 RETURNING id)
     UPDATE ${t.limitSlots} SET token = $2, worker = $5, taken_at = now()
     WHERE key = $3 AND run_id = $1 AND slot < $4 AND EXISTS (SELECT 1 FROM run) RETURNING slot`,
  ),
  /** How many runs of key $1 wait for a slot ahead of run $2 with priority $3 (higher, or as high and older). */
  ahead: namedStatement(
    'limit_waiters_ahead',
    `SELECT count(*)::int AS n FROM ${t.runs} w, ${t.runs} me
     WHERE me.id = $2 AND w.open_limit_key = $1 AND w.state IN ('pending', 'retrying') AND w.id <> me.id
       AND (w.available_at IS NULL OR w.available_at <= now())
       AND (w.priority > $3 OR (w.priority = $3 AND (w.scheduled_at, w.id) < (me.scheduled_at, me.id)))`,
  ),
  /** Take a free slot of key $3 (below $4) for run $1 under claim $2 on worker $5 (workers alive within $6 ms). */
  take: namedStatement(
    'take_limit_slot',
    `WITH free AS (
       SELECT s.key, s.slot FROM ${t.limitSlots} s
       WHERE s.key = $3 AND s.slot < $4 AND ${slotIsFree(t, '$6')}
       ORDER BY s.slot LIMIT 1 FOR UPDATE SKIP LOCKED),
     run AS (UPDATE ${t.runs} SET limit_key = $3 WHERE id = $1 AND claim_token = $2 RETURNING id)
     UPDATE ${t.limitSlots} s SET run_id = $1, token = $2, worker = $5, taken_at = now()
     FROM free WHERE s.key = free.key AND s.slot = free.slot AND EXISTS (SELECT 1 FROM run) RETURNING s.slot`,
  ),
  /** Whether key $1 has a free slot below $2 (workers alive within $3 ms). */
  free: namedStatement(
    'limit_slot_free',
    `SELECT EXISTS (SELECT 1 FROM ${t.limitSlots} s WHERE s.key = $1 AND s.slot < $2 AND ${slotIsFree(t, '$3')}) AS free`,
  ),
  /**
   * Worker $1 starts: the slots an earlier start of it held for runs no longer running are free.
   * That start is dead (killed, then started again under its name within the window, its row never
   * stopped beating), so it will never release them; a run it left running keeps its slot when this
   * start claims it again (keep).
   */
  releaseEarlierStart: namedStatement(
    'release_earlier_start_slots',
    `UPDATE ${t.limitSlots} s SET run_id = NULL, token = NULL, worker = NULL, taken_at = NULL
     WHERE s.worker = $1
       AND NOT EXISTS (SELECT 1 FROM ${t.runs} r WHERE r.id = s.run_id AND r.state = 'running')
     RETURNING s.key`,
  ),
  /** The handler of run $2 (claim $3) returned: its slot of key $1 is free. */
  release: namedStatement(
    'release_limit_slot',
    `UPDATE ${t.limitSlots} SET run_id = NULL, token = NULL, worker = NULL, taken_at = NULL
     WHERE key = $1 AND run_id = $2 AND token = $3`,
  ),
  /**
   * Run $1 (claim $2, attempt $3) goes back to wait in the ledger, with the reason $4: for a slot of
   * key $5 (priority $6) when $5 is set, not before $7 when it is set.
   */
  wait: namedStatement(
    'wait_in_ledger',
    `WITH claim AS (SELECT claimed_by, claimed_at FROM ${t.runs} WHERE id = $1),
     run AS (
       UPDATE ${t.runs} SET state = 'pending', claimed_by = NULL, error = $4, limit_key = COALESCE($5, limit_key),
         priority = COALESCE($6::int, priority), available_at = $7::timestamptz, enqueued_at = now(), delivery_checked_at = now()
       WHERE id = $1 AND claim_token = $2 AND state = 'running' RETURNING id)
     ${writeOwnEndedAttempts(
       t,
       `SELECT run.id, $3::int, $2::bigint, COALESCE(claim.claimed_by, '${UNKNOWN_WORKER}'), 'skipped',
          COALESCE(claim.claimed_at, now()), $4::text, NULL::text FROM run, claim`,
     )}`,
  ),
  /** Up to $2 runs waiting for a slot of key $1, oldest first, with their claims so far. */
  heads: namedStatement(
    'limit_waiters',
    `SELECT id, attempts FROM ${t.runs}
     WHERE open_limit_key = $1 AND state IN ('pending', 'retrying') AND (available_at IS NULL OR available_at <= now())
     ORDER BY priority DESC, scheduled_at, id LIMIT $2`,
  ),
}));

/**
 * Take a slot of the request's key for its run on `worker` (or keep the one it held before a
 * takeover); 'full' when none is free or an older run of the key waits. One transaction.
 */
export async function acquireSlot(
  pool: pg.Pool,
  t: Tables,
  r: SlotRequest,
  o: { worker: string; liveWithinMs: number },
): Promise<SlotResult> {
  const window = Math.max(0, Math.floor(o.liveWithinMs));
  return withTransaction(pool, async (client) => {
    const s = statements(t);
    const run = [r.runId.toString(), r.token.toString(), r.key, r.limit, o.worker];
    const kept = await client.query<{ slot: number }>({ ...s.keep, values: run });
    if (kept.rows[0]) return { status: 'held', slot: kept.rows[0].slot };
    await client.query({ ...s.slots, values: [r.key, r.limit] });
    const ahead = await client.query<{ n: number }>({
      ...s.ahead,
      values: [r.key, r.runId.toString(), r.priority],
    });
    const n = ahead.rows[0]?.n ?? 0;
    if (n === 0) {
      const taken = await client.query<{ slot: number }>({ ...s.take, values: [...run, window] });
      if (taken.rows[0]) return { status: 'held', slot: taken.rows[0].slot };
    }
    const why = n > 0 ? `${n} older run${n === 1 ? '' : 's'} of it waiting` : 'every slot taken';
    const wakeOlder =
      n > 0 &&
      ((await client.query<{ free: boolean }>({ ...s.free, values: [r.key, r.limit, window] })).rows[0]?.free ?? false);
    return {
      status: 'full',
      reason: `waiting for a slot of concurrency key "${r.key}" (limit ${r.limit}): ${why}`,
      wakeOlder,
    };
  });
}

/** Worker `worker` starts: free the slots its earlier start held for runs that ended; how many. */
export async function releaseEarlierStartSlots(db: Queryable, t: Tables, worker: string): Promise<number> {
  return (await db.query({ ...statements(t).releaseEarlierStart, values: [worker] })).rowCount ?? 0;
}

/** The run's handler returned: its slot is free for the next run. */
export async function releaseSlot(db: Queryable, t: Tables, r: SlotRequest): Promise<void> {
  await db.query({ ...statements(t).release, values: [r.key, r.runId.toString(), r.token.toString()] });
}

/**
 * The run goes back to wait in the ledger (its attempt recorded skipped with the reason): for a
 * slot of `slot.key`, or until `until` (a rate limit's turn).
 */
export async function waitInLedger(
  db: Queryable,
  t: Tables,
  a: WaitingAttempt,
  reason: string,
  o: { slot?: Pick<SlotRequest, 'key' | 'priority'>; until?: Date },
): Promise<void> {
  await db.query({
    ...statements(t).wait,
    values: [
      a.runId.toString(),
      a.token.toString(),
      a.attempt,
      reason,
      o.slot?.key ?? null,
      o.slot?.priority ?? null,
      o.until ?? null,
    ],
  });
}

/** The oldest runs waiting for a slot of `key` (at most `limit`), to deliver when a slot frees. */
export async function slotWaiters(
  db: Queryable,
  t: Tables,
  key: string,
  limit: number,
): Promise<{ runId: bigint; attempts: number }[]> {
  const res = await db.query<{ id: string; attempts: number }>({ ...statements(t).heads, values: [key, limit] });
  return res.rows.map((r) => ({ runId: BigInt(r.id), attempts: r.attempts }));
}
