/**
 * The members as the admin API shows them: each one's role read from the lease (who holds it),
 * not from its own heartbeat row, and whether it has stopped beating. A replica killed with
 * SIGKILL leaves a row that says "leader" until the row ages out of the list (a minute), and a
 * follower campaigning says "candidate": what the lease says is the truth, and a row that missed
 * three beats belongs to a replica that is gone or frozen.
 */
import type { LeaseBackend } from '../locks/lease.js';
import { MEMBER_BEAT_MS } from '../ledger/members.js';
import type { MemberRow } from '../ledger/admin-reads.js';

/** A member whose last beat is older than this has stopped beating (three beats missed). */
export const STOPPED_BEATING_MS = 3 * MEMBER_BEAT_MS;

export interface MemberView extends MemberRow {
  /** leader: holds the lease (or, sharded, some shard's); follower: does not. */
  role: 'leader' | 'follower';
  /** The shards whose lease it holds (sharded leadership only). */
  leads?: number[];
  /** Missed three beats: killed, frozen or cut off (its row stays listed for a minute). */
  stoppedBeating: boolean;
}

/**
 * `members` with roles from the leases named `leases` (one, or one per shard). When the lease
 * backend cannot be read, a member's own word is used, with "candidate" shown as the follower it is.
 */
export async function memberRoles(
  members: readonly MemberRow[],
  backend: Pick<LeaseBackend, 'current'>,
  leases: readonly string[],
): Promise<MemberView[]> {
  const holders = await Promise.all(leases.map((name) => backend.current(name).then((l) => l?.holder ?? null)))
    .then((h): (string | null)[] | undefined => h)
    .catch(() => undefined);
  return members.map((m) => {
    const stoppedBeating = m.lastSeenAgoMs > STOPPED_BEATING_MS;
    if (!holders) return { ...m, role: m.role === 'leader' ? 'leader' : 'follower', stoppedBeating };
    const leads = holders.flatMap((h, shard) => (h === m.replicaId ? [shard] : []));
    return {
      ...m,
      role: leads.length > 0 ? 'leader' : 'follower',
      ...(leases.length > 1 && { leads }),
      stoppedBeating,
    };
  });
}
