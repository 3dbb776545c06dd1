/**
 * Fences: per resource, the highest token that wrote it. A write carrying a lower token is refused
 * (StaleTokenError); equal tokens pass, so one holder writes many times under one token.
 */
import { StaleTokenError } from '../errors.js';
import type { Queryable } from './transaction.js';

/** Advance `resource`'s fence to `token` unless a higher token was already accepted. */
export async function advanceFence(db: Queryable, resource: string, token: bigint): Promise<void> {
  const res = await db.query(
    `INSERT INTO cw_fences (resource, token) VALUES ($1, $2)
     ON CONFLICT (resource) DO UPDATE SET token = EXCLUDED.token, updated_at = now()
     WHERE cw_fences.token <= EXCLUDED.token
     RETURNING token`,
    [resource, token.toString()],
  );
  if (res.rowCount === 0) throw new StaleTokenError(resource, token, await fenceToken(db, resource));
}

export async function fenceToken(db: Queryable, resource: string): Promise<bigint | null> {
  const res = await db.query<{ token: string }>('SELECT token FROM cw_fences WHERE resource = $1', [resource]);
  return res.rows[0] ? BigInt(res.rows[0].token) : null;
}

/**
 * ctx.fence: refuse unless this attempt still holds the run's newest claim, then advance the
 * resource's fence to the attempt's token (refused if a higher token already wrote it). Inside
 * the handler's own transaction (`db`), the fence row stays locked until it commits, so writes
 * to one resource land in token order. The run row is not locked: a paused attempt must never
 * keep a newer attempt from claiming the run.
 */
export async function fenceRun(db: Queryable, resource: string, claim: { runId: bigint; token: bigint }): Promise<void> {
  const res = await db.query(
    `WITH mine AS (SELECT 1 FROM cw_runs WHERE id = $3 AND claim_token = $2)
     INSERT INTO cw_fences (resource, token) SELECT $1, $2 WHERE EXISTS (SELECT 1 FROM mine)
     ON CONFLICT (resource) DO UPDATE SET token = EXCLUDED.token, updated_at = now()
     WHERE cw_fences.token <= EXCLUDED.token
     RETURNING token`,
    [resource, claim.token.toString(), claim.runId.toString()],
  );
  if (res.rowCount === 0) throw new StaleTokenError(resource, claim.token, await fenceToken(db, resource));
}
