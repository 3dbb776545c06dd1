/**
 * Who leads: the lease (per shard with sharded leadership), the members and whether they agree,
 * the history of elections, and resigning leadership (token, leader only).
 */
import { z } from 'zod';
import { electedAt, listElections, listMembers, memberAdminUrl } from '../ledger/admin-reads.js';
import type { AdminRoute, RouteContext } from './admin-route.js';
import { HttpError, parse } from './http-error.js';
import { memberAgreement } from './member-agreement.js';
import { memberRoles } from './member-roles.js';
import { notLeader } from './not-leader.js';

/** GET /api/elections: the limit, and with sharded leadership the shard (default 0). */
const electionsQuery = z.object({
  limit: z.coerce
    .number()
    .int('must be a whole number')
    .min(1, 'must be at least 1')
    .max(500, 'must be at most 500')
    .default(20),
  shard: z.coerce.number().int('must be a whole number').min(0, 'must be at least 0').optional(),
});

export const leadershipRoutes: AdminRoute[] = [
  {
    method: 'GET',
    path: '/api/lease',
    access: 'read',
    summary:
      "the lease: backend, holder, token, expiry, the leader's admin URL, this replica's role; per shard when sharded",
    handle: (c, req) => c.read(req, () => leaseStatus(c)),
  },
  {
    method: 'GET',
    path: '/api/members',
    access: 'read',
    summary:
      'the replicas seen in the last minute (version, role from the lease, admin URL, last beat, stopped beating) and whether they agree',
    handle: (c, req) =>
      c.read(req, async () => {
        const rows = await listMembers(c.pool, c.reads.tables);
        const members = await memberRoles(rows, c.backend, c.replica.shardLeases ?? [c.replica.leaseName]);
        return { members, agreement: memberAgreement(rows) };
      }),
  },
  {
    method: 'GET',
    path: '/api/elections',
    access: 'read',
    summary: 'the failover history of a lease (`?shard=&limit=`): leaders, tokens, handover and gap times',
    handle: (c, req) =>
      c.read(req, async () => {
        const q = parse(electionsQuery, req.query);
        const r = c.replica;
        const leases = r.shardLeases ?? [r.leaseName];
        const leaseName = leases[q.shard ?? 0];
        if (leaseName === undefined)
          throw new HttpError(400, 'bad_request', `shard: must be below ${leases.length} (the shard count)`);
        return { leaseName, elections: await listElections(c.pool, c.reads.tables, leaseName, q.limit) };
      }),
  },
  {
    method: 'POST',
    path: '/api/resign',
    access: 'token',
    summary: 'give up leadership (leader only; a follower answers 409 naming the leader)',
    handle: async (c) => {
      const r = c.replica;
      const lease = r.lease();
      if (r.role !== 'leader' || !lease) return notLeader(c);
      const resigned = await r.resign();
      if (!resigned) return notLeader(c);
      r.logger.info({ token: lease.token.toString() }, 'admin: resigned leadership');
      return { resigned: true, replicaId: r.replicaId, token: lease.token.toString() };
    },
  },
];

/** The body of GET /api/lease. */
async function leaseStatus(c: RouteContext) {
  const r = c.replica;
  const t = c.reads.tables;
  const cur = await c.backend.current(r.leaseName);
  return {
    backend: r.backendKind,
    leaseName: r.leaseName,
    holder: cur?.holder ?? null,
    token: cur?.token.toString() ?? null,
    ttlMs: r.ttlMs,
    expiresInMs: cur ? Math.max(0, Math.round(cur.expiresInMs)) : null,
    leaderSince: cur ? await electedAt(c.pool, t, r.leaseName, cur.holder, cur.token) : null,
    leaderAdminUrl: cur ? await memberAdminUrl(c.pool, t, cur.holder) : null,
    replicaId: r.replicaId,
    role: r.role,
    leadingSince: r.leadingSince === undefined ? null : new Date(r.leadingSince).toISOString(),
    shards: r.shardLeases ? await shardStatus(c, r.shardLeases) : undefined,
  };
}

/** Sharded leadership: who leads which shard, with its token and admin URL. */
async function shardStatus(c: RouteContext, leases: readonly string[]) {
  const holders = await Promise.all(leases.map((name) => c.backend.current(name).catch(() => null)));
  const urls = new Map<string, string | null>();
  for (const h of new Set(holders.map((cur) => cur?.holder).filter((h): h is string => h !== undefined)))
    urls.set(h, await memberAdminUrl(c.pool, c.reads.tables, h));
  return leases.map((leaseName, shard) => {
    const cur = holders[shard];
    return {
      shard,
      leaseName,
      holder: cur?.holder ?? null,
      token: cur?.token.toString() ?? null,
      expiresInMs: cur ? Math.max(0, Math.round(cur.expiresInMs)) : null,
      leaderAdminUrl: cur ? (urls.get(cur.holder) ?? null) : null,
    };
  });
}
