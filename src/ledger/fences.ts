/**
 * Fences: per resource, the highest token that wrote it. A write carrying a lower token is refused;
 * equal tokens pass, so one holder writes many times under one token. The scheduler's fence holds
 * leader tokens; a resource a handler fences holds slot tokens (slot-token.ts).
 */
import { StaleTokenError, SupersededError } from '../errors.js';
import { slotOf, slotToken } from './slot-token.js';
import type { Tables } from '../db/tables.js';
import type { Queryable } from './transaction.js';

/** Advance `resource`'s fence to `token` unless a higher token was already accepted. */
export async function advanceFence(db: Queryable, t: Tables, resource: string, token: bigint): Promise<void> {
  const res = await db.query(
    `INSERT INTO ${t.fences} AS f (resource, token) VALUES ($1, $2)
     ON CONFLICT (resource) DO UPDATE SET token = EXCLUDED.token, updated_at = now()
     WHERE f.token <= EXCLUDED.token
     RETURNING token`,
    [resource, token.toString()],
  );
  if (res.rowCount === 0) throw new StaleTokenError(resource, token, await fenceToken(db, t, resource));
}

export async function fenceToken(db: Queryable, t: Tables, resource: string): Promise<bigint | null> {
  const res = await db.query<{ token: string }>(`SELECT token FROM ${t.fences} WHERE resource = $1`, [resource]);
  return res.rows[0] ? BigInt(res.rows[0].token) : null;
}

/** What ctx.fence knows of the attempt it guards. */
export interface FencedAttempt {
  runId: bigint;
  /** Execution token of the attempt's claim. */
  token: bigint;
  scheduledAt: Date;
  attempt: number;
}

/**
 * ctx.fence: refuse unless this attempt still holds the run's newest claim (StaleTokenError), then
 * advance the resource's fence to the attempt's slot token (slot-token.ts). A higher slot token
 * already there means a later slot wrote: SupersededError, the run is late, not stale. Inside the
 * handler's own transaction (`db`), the fence row stays locked until it commits, so writes to
 * one resource land in slot order. The run row is not locked: a paused attempt must never keep
 * a newer attempt from claiming the run.
 */
export async function fenceRun(db: Queryable, t: Tables, resource: string, attempt: FencedAttempt): Promise<void> {
  const mine = slotToken(attempt.scheduledAt, attempt.attempt);
  const res = await db.query(
    `WITH mine AS (SELECT 1 FROM ${t.runs} WHERE id = $3 AND claim_token = $4)
     INSERT INTO ${t.fences} AS f (resource, token) SELECT $1, $2 WHERE EXISTS (SELECT 1 FROM mine)
     ON CONFLICT (resource) DO UPDATE SET token = EXCLUDED.token, updated_at = now()
     WHERE f.token <= EXCLUDED.token
     RETURNING token`,
    [resource, mine.toString(), attempt.runId.toString(), attempt.token.toString()],
  );
  if (res.rowCount === 1) return;
  const run = await db.query<{ claim_token: string | null }>(`SELECT claim_token FROM ${t.runs} WHERE id = $1`, [
    attempt.runId.toString(),
  ]);
  const newestClaim = run.rows[0]?.claim_token ?? null;
  if (newestClaim !== attempt.token.toString()) {
    throw new StaleTokenError(`run ${attempt.runId}`, attempt.token, newestClaim === null ? null : BigInt(newestClaim));
  }
  const highest = await fenceToken(db, t, resource);
  if (highest !== null && slotOf(highest) > attempt.scheduledAt)
    throw new SupersededError(resource, attempt.scheduledAt, slotOf(highest));
  throw new StaleTokenError(resource, mine, highest);
}
