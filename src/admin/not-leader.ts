/**
 * A follower's refusal of a leader-only request: 409 naming the leader of the lease and its admin
 * URL (from cw_members), which the CLI follows.
 */
import { memberAdminUrl } from '../ledger/admin-reads.js';
import type { RouteContext } from './admin-route.js';
import { HttpError } from './http-error.js';

/** Throws the 409 for `leaseName` (sharded: the job's shard's), the scheduler's lease by default. */
export async function notLeader(
  c: Pick<RouteContext, 'replica' | 'backend' | 'pool' | 'reads'>,
  leaseName?: string,
): Promise<never> {
  const r = c.replica;
  const cur = await c.backend.current(leaseName ?? r.leaseName).catch(() => null);
  const leaderAdminUrl = cur ? await memberAdminUrl(c.pool, c.reads.tables, cur.holder).catch(() => null) : null;
  throw new HttpError(409, 'not_leader', `replica "${r.replicaId}" is not the leader`, {
    leader: cur?.holder ?? null,
    leaderAdminUrl,
  });
}
