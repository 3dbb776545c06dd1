/**
 * A tenure in cw_elections: recorded when an election is won, then stamped by the leader on every
 * successful renew and when it releases the lease, on the database clock (the one elected_at is
 * on). For the failover timeline a handover is then measured from the previous tenure's release
 * (graceful) or last renew (a crash, a partition: the lease ran out after it), not from its last
 * fire.
 */
import type { Tables } from '../db/tables.js';
import { namedStatement, perSchema } from './named-statement.js';
import type { Queryable } from './transaction.js';

const statements = perSchema((t) => ({
  elected: namedStatement(
    'record_election',
    `INSERT INTO ${t.elections} (lease_name, leader, token, backend) VALUES ($1, $2, $3, $4) RETURNING id`,
  ),
  renewed: namedStatement('record_renew', `UPDATE ${t.elections} SET renewed_at = now() WHERE id = $1`),
  released: namedStatement(
    'record_release',
    `UPDATE ${t.elections} SET released_at = now() WHERE id = $1 AND released_at IS NULL`,
  ),
}));

/** A won election (a tenure); returns its id, for recording the tenure's renews and release. */
export async function recordElection(
  db: Queryable,
  t: Tables,
  leaseName: string,
  leader: string,
  token: bigint,
  backend: string,
): Promise<bigint> {
  const res = await db.query<{ id: string }>({
    ...statements(t).elected,
    values: [leaseName, leader, token.toString(), backend],
  });
  return BigInt(res.rows[0]!.id);
}

export async function recordRenew(db: Queryable, t: Tables, electionId: bigint): Promise<void> {
  await db.query({ ...statements(t).renewed, values: [electionId.toString()] });
}

export async function recordRelease(db: Queryable, t: Tables, electionId: bigint): Promise<void> {
  await db.query({ ...statements(t).released, values: [electionId.toString()] });
}
