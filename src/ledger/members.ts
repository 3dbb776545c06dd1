/** cw_members: one row per live replica, kept by its heartbeat, read by the admin API. */
import type { Tables } from '../db/tables.js';
import type { Queryable } from './transaction.js';

export interface MemberRecord {
  replicaId: string;
  host: string;
  pid: number;
  version: string;
  role: string;
  adminUrl: string | null;
}

/** Insert or refresh this replica's row; last_seen on the database clock. */
export async function upsertMember(db: Queryable, t: Tables, m: MemberRecord): Promise<void> {
  await db.query(
    `INSERT INTO ${t.members} (replica_id, host, pid, version, role, admin_url, started_at, last_seen)
     VALUES ($1, $2, $3, $4, $5, $6, now(), now())
     ON CONFLICT (replica_id) DO UPDATE SET host = EXCLUDED.host, pid = EXCLUDED.pid, version = EXCLUDED.version,
       role = EXCLUDED.role, admin_url = EXCLUDED.admin_url, last_seen = now()`,
    [m.replicaId, m.host, m.pid, m.version, m.role, m.adminUrl],
  );
}

export async function deleteMember(db: Queryable, t: Tables, replicaId: string): Promise<void> {
  await db.query(`DELETE FROM ${t.members} WHERE replica_id = $1`, [replicaId]);
}
