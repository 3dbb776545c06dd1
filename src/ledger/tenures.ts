/**
 * A tenure's end as the ledger sees it, for the failover timeline: the leader stamps its election
 * row on every successful renew and when it releases the lease, on the database clock (the one
 * elected_at is on). A handover is then measured from the previous tenure's release (graceful)
 * or last renew (a crash, a partition: the lease ran out after it), not from its last fire.
 */
import type { Queryable } from './transaction.js';
import type { Tables } from '../db/tables.js';

export async function recordRenew(db: Queryable, t: Tables, electionId: bigint): Promise<void> {
  await db.query(`UPDATE ${t.elections} SET renewed_at = now() WHERE id = $1`, [electionId.toString()]);
}

export async function recordRelease(db: Queryable, t: Tables, electionId: bigint): Promise<void> {
  await db.query(`UPDATE ${t.elections} SET released_at = now() WHERE id = $1 AND released_at IS NULL`, [
    electionId.toString(),
  ]);
}
