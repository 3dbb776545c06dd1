/**
 * Rate limits across replicas and jobs: at most `max` runs of a key start in any `perMs` window.
 * The ledger keeps each key's recent starts, and a run that would exceed the limit reserves the
 * earliest instant it may start (the max-th newest start plus the window): it waits in the ledger
 * until then (pending, not before that instant) and starts on its reservation when it is delivered
 * again, so the waiting runs of a key start in the order they came, each waiting once. The check
 * is strict: each start (or reservation) has at most max - 1 others in any window around it. A
 * reservation whose run did not start (it failed, was cancelled) still counts: the limit errs on
 * the safe side. A key's starts are serialised by a transaction-scoped advisory lock.
 */
import type { Tables } from '../db/tables.js';
import { namedStatement, perSchema } from './named-statement.js';
import { withTransaction } from './transaction.js';
import type pg from 'pg';

/** A claimed run asking to start under the rate limit of `key`. */
export interface RateRequest {
  runId: bigint;
  key: string;
  max: number;
  perMs: number;
}

/** 'start': go on now. 'later': not before `at` (its reservation), `reason` says why. */
export type RateResult = { status: 'start' } | { status: 'later'; at: Date; waitMs: number; reason: string };

const statements = perSchema((t) => ({
  /** Serialise the starts of key $1 in this ledger (its schema names it, so namespaces do not wait for each other). */
  lock: namedStatement('lock_rate_key', `SELECT pg_advisory_xact_lock(hashtextextended('${t.rateStarts}:' || $1, 0))`),
  /** Run $2's reservation for key $1 not yet used: when, and how long from now. */
  reserved: namedStatement(
    'rate_reservation',
    `SELECT at, ceil(extract(epoch FROM at - now()) * 1000)::int AS wait_ms FROM ${t.rateStarts}
     WHERE key = $1 AND run_id = $2 AND NOT used ORDER BY at LIMIT 1`,
  ),
  /** Use run $2's reservation for key $1 whose instant has come. */
  use: namedStatement(
    'use_rate_reservation',
    `UPDATE ${t.rateStarts} SET used = true WHERE key = $1 AND run_id = $2 AND NOT used AND at <= now()`,
  ),
  /** Forget key $1's starts older than the window $2 ms (they no longer count). */
  prune: namedStatement(
    'prune_rate_starts',
    `DELETE FROM ${t.rateStarts} WHERE key = $1 AND at <= now() - $2::bigint * interval '1 millisecond'`,
  ),
  /**
   * Run $2 starts now, or reserves the earliest instant it may: with $3 or more starts in the last
   * window (or reserved ahead), the $3-th newest plus the window $4 ms. Returns the instant.
   */
  reserve: namedStatement(
    'reserve_rate_start',
    `WITH newest AS (
       SELECT at FROM ${t.rateStarts} WHERE key = $1 ORDER BY at DESC LIMIT $3),
     slot AS (
       SELECT CASE WHEN count(*) < $3 THEN now()
                   ELSE GREATEST(now(), min(at) + $4::bigint * interval '1 millisecond') END AS at
       FROM newest)
     INSERT INTO ${t.rateStarts} (key, at, run_id, used)
     SELECT $1, slot.at, $2, slot.at <= now() FROM slot
     RETURNING at, used, ceil(extract(epoch FROM at - now()) * 1000)::int AS wait_ms`,
  ),
}));

/** May the run start now under its key's rate limit? Reserves its start (now, or its turn). One transaction. */
export async function takeRateStart(pool: pg.Pool, t: Tables, r: RateRequest): Promise<RateResult> {
  const reason = (at: Date) =>
    `waiting for its turn under rate limit "${r.key}" (${r.max} per ${r.perMs} ms): starts at ${at.toISOString()}`;
  return withTransaction(pool, async (client) => {
    const s = statements(t);
    await client.query({ ...s.lock, values: [r.key] });
    const mine = await client.query<{ at: Date; wait_ms: number }>({
      ...s.reserved,
      values: [r.key, r.runId.toString()],
    });
    const held = mine.rows[0];
    if (held) {
      if (held.wait_ms > 0) return { status: 'later', at: held.at, waitMs: held.wait_ms, reason: reason(held.at) };
      await client.query({ ...s.use, values: [r.key, r.runId.toString()] });
      return { status: 'start' };
    }
    await client.query({ ...s.prune, values: [r.key, r.perMs] });
    const res = await client.query<{ at: Date; used: boolean; wait_ms: number }>({
      ...s.reserve,
      values: [r.key, r.runId.toString(), r.max, r.perMs],
    });
    const row = res.rows[0]!;
    return row.used
      ? { status: 'start' }
      : { status: 'later', at: row.at, waitMs: row.wait_ms, reason: reason(row.at) };
  });
}
