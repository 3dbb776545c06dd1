/** Fault kinds the drill can strike, and a seeded schedule of them. */
import { resolveElectorOptions } from '../scheduler/election/elector-options.js';

export const faultKinds = [
  'kill', // SIGKILL of the leader
  'stop', // SIGSTOP of the leader past the TTL, then SIGCONT: the stale leader
  'term', // SIGTERM of the leader: graceful hand-over
  'backend-restart', // kill -9 and restart of the backend (one member of etcd's three)
  'backend-restart-all', // every etcd member at once
  'link-cut', // partition between the leader and the backend, past the TTL
  'link-slow', // 75 ± 50 ms each way on the leader's link: must not flap
  'link-lossy', // lost segments (a retransmission timeout each) on the leader's link: must not flap
  'clock-skew', // the leader's wall clock minutes ahead, then minutes behind
  // What each of the following rests on is said in the README's "Failover drill" and in strike.ts.
  'queue-restart', // kill -9 of BullMQ's Redis (the drill's own), restarted empty: no persistence
  'queue-flush', // FLUSHALL on BullMQ's Redis: every queued and active job gone
  'ledger-restart', // kill -9 of the ledger's PostgreSQL (the drill's own) and restart
  'ledger-failover', // kill -9 of the ledger's primary, its synchronous standby promoted
  'redis-sentinel-failover', // kill -9 of the Redis lease primary; Sentinel promotes the replica
  'cpu-starve', // busy loops on every core beside the replicas
] as const;
export type FaultKind = (typeof faultKinds)[number];

/** Faults after which leadership must stay where it is. */
export const keepsLeader: ReadonlySet<FaultKind> = new Set(['link-slow', 'link-lossy', 'clock-skew']);

/**
 * Faults that must move leadership to a new tenure (a higher lease token): the leader is killed,
 * frozen past its TTL, shut down, or cut off from the lease backend past its TTL.
 */
export const movesLeader: ReadonlySet<FaultKind> = new Set(['kill', 'stop', 'term', 'link-cut']);

/**
 * I5's bound for a fault, if it has one: after a crash (kill, or a leader frozen or cut off past
 * its TTL) the lease must lapse and be taken, and the new leader fire, within TTL + 1.5 retry
 * periods (the renew period, TTL/5) + one tick (1 s) + 0.5 s slack; after SIGTERM (lease released)
 * within one tick + 0.5 s. Other faults have no gap bound.
 */
export function i5BoundMs(kind: FaultKind, ttlMs: number): number | null {
  if (kind === 'kill' || kind === 'stop' || kind === 'link-cut')
    return ttlMs + Math.max(50, Math.floor(ttlMs / 5)) * 1.5 + 1000 + 500;
  if (kind === 'term') return 1500;
  return null;
}

/** Faults whose struck replica leaves (killed, shut down) or freezes: the shards must be balanced among the others within a bound. */
const rebalancedAfter: ReadonlySet<FaultKind> = new Set(['kill', 'term', 'stop']);

/**
 * Sharded leadership's bounds for a fault (null: none): the struck replica's shards balanced among
 * the live replicas within 2 TTLs, and no shard without a live leader for longer than I5's crash
 * bound, TTL + the electors' retry period + one tick (1 s), or after SIGTERM its graceful one. A
 * link cut leaves the cut-off replica running and holding nothing, so the shards are balanced only
 * after the link heals: measured, not bounded.
 */
export function shardBoundsMs(
  kind: FaultKind,
  ttlMs: number,
): { rebalanceMs: number | null; leaderlessMs: number | null } {
  const { retryPeriodMs } = resolveElectorOptions({ leaseName: 'drill', replicaId: 'drill', ttlMs });
  return {
    rebalanceMs: rebalancedAfter.has(kind) ? 2 * ttlMs : null,
    // SIGTERM releases the leases: I5's graceful bound, not a crash's.
    leaderlessMs: !movesLeader.has(kind)
      ? null
      : kind === 'term'
        ? i5BoundMs('term', ttlMs)
        : ttlMs + retryPeriodMs + 1000,
  };
}

/** With shards: did the struck replica's shards find leaders, and a fair spread, in time? Pure. */
export function judgeShards(
  kind: FaultKind,
  ttlMs: number,
  strikeAt: number,
  m: { rebalanceMs: number | null; maxLeaderlessMs: number; maxLeaderlessShard: number | null },
): string[] {
  const when = new Date(strikeAt).toISOString();
  const bound = shardBoundsMs(kind, ttlMs);
  const violations: string[] = [];
  if (bound.rebalanceMs !== null && (m.rebalanceMs === null || m.rebalanceMs > bound.rebalanceMs))
    violations.push(
      `rebalance: ${kind} at ${when}: shards balanced ${m.rebalanceMs === null ? 'not before the next fault' : `after ${m.rebalanceMs} ms`}, bound ${bound.rebalanceMs} ms`,
    );
  if (bound.leaderlessMs !== null && m.maxLeaderlessMs > bound.leaderlessMs)
    violations.push(
      `I5: ${kind} at ${when}: shard ${m.maxLeaderlessShard} had no live leader for ${m.maxLeaderlessMs} ms, bound ${bound.leaderlessMs} ms`,
    );
  return violations;
}

/** What the drill saw around one fault, in epoch ms. */
export interface FaultObservation {
  kind: FaultKind;
  ttlMs: number;
  strikeAt: number;
  /** Fires were committing just before the strike. */
  flowing: boolean;
  /** The lease holder and its token just before the strike (null: no leader known). */
  leaderBefore: { id: string; token: bigint } | null;
  /** First fire committed after the strike, under any leader token (the old leader's included). */
  firstFireAt: number | null;
  /** First fire committed after the strike under a leader token higher than leaderBefore's: the new tenure's. */
  firstNewTenureFireAt: number | null;
  /** From the strike until the backend named a different live holder (null: not seen). */
  handoverMs: number | null;
  /** Changes of leader from the strike until the next fault. */
  leaderChanges: number;
  /** What exactly struck, for the messages. */
  detail?: string;
}

export interface FaultJudgement {
  /**
   * For faults that move leadership: strike → first fire of the new tenure (a fire of the old
   * leader, which a link-cut leader keeps committing until its own deadline, does not end the gap).
   * For the others: strike → first fire committed after it.
   */
  gapMs: number | null;
  boundMs: number | null;
  /** The fault proved something: fires flowed before it, a leader was struck, and (for faults that move leadership) a new tenure fired after it; otherwise any fire after it. */
  counted: boolean;
  violations: string[];
}

/** Judge one fault: did it count, did it break I5, did leadership flap where it must stay. Pure. */
export function judgeFault(o: FaultObservation): FaultJudgement {
  const when = new Date(o.strikeAt).toISOString();
  const boundMs = i5BoundMs(o.kind, o.ttlMs);
  const moves = movesLeader.has(o.kind);
  const end = moves ? o.firstNewTenureFireAt : o.firstFireAt;
  const gapMs = end === null ? null : end - o.strikeAt;
  const struck = o.flowing && o.leaderBefore !== null;
  const counted = struck && end !== null;
  const violations: string[] = [];
  if (!struck || (!moves && end === null)) {
    violations.push(
      `fault ${o.kind} at ${when} proves nothing (fires flowing before: ${o.flowing}, leader known: ${o.leaderBefore !== null}, fire after: ${o.firstFireAt !== null})`,
    );
  } else if (moves && end === null) {
    // The old tenure may well have kept firing (a link-cut leader until its deadline): that proves
    // nothing about failover. No new leader fired at all: I5 is broken, and the fault does not count.
    const old =
      o.firstFireAt === null
        ? 'no fire at all after the strike'
        : `only the old leader (token ${o.leaderBefore!.token}) committed after the strike`;
    violations.push(`I5: ${o.kind} at ${when}: no fire under a new leader (token > ${o.leaderBefore!.token}); ${old}`);
  }
  if (gapMs !== null && boundMs !== null && gapMs > boundMs) {
    violations.push(
      `I5: ${o.kind} at ${when}: ${moves ? 'first fire of the new leader' : 'next fire'} after ${gapMs} ms, bound ${boundMs} ms`,
    );
  }
  if (o.handoverMs !== null && boundMs !== null && o.handoverMs > boundMs) {
    violations.push(`I5: ${o.kind} at ${when}: new leader after ${o.handoverMs} ms, bound ${boundMs} ms`);
  }
  if (keepsLeader.has(o.kind) && o.leaderChanges > 0)
    violations.push(
      `flap: ${o.kind}${o.detail ? ` (${o.detail})` : ''} at ${when} changed the leader ${o.leaderChanges} time(s)`,
    );
  return { gapMs, boundMs, counted, violations };
}

/**
 * Faults that need a topology of their own, so they are struck only when asked for by name: a
 * ledger primary with a standby (pg_basebackup, a few seconds per failover), and a Redis lease
 * reached through Sentinel (which the per-replica link proxies cannot stand in front of).
 */
export const topologyFaults: ReadonlySet<FaultKind> = new Set(['ledger-failover', 'redis-sentinel-failover']);

/** Faults on the replicas' links to the lease backend: not possible through Sentinel. */
export const linkFaults: ReadonlySet<FaultKind> = new Set(['link-cut', 'link-slow', 'link-lossy']);

/**
 * Every kind that means something on `backend`, without the topology faults; clock-skew only
 * where libfaketime is installed.
 */
export function applicableFaults(backend: 'etcd' | 'redis' | 'postgres', hasLibfaketime: boolean): FaultKind[] {
  return faultKinds.filter(
    (k) =>
      !topologyFaults.has(k) &&
      (k !== 'backend-restart-all' || backend === 'etcd') &&
      (k !== 'clock-skew' || hasLibfaketime),
  );
}

/** Why `kinds` cannot be struck together on `backend`, or null when they can. */
export function faultConflict(backend: 'etcd' | 'redis' | 'postgres', kinds: readonly FaultKind[]): string | null {
  if (!kinds.includes('redis-sentinel-failover')) return null;
  if (backend !== 'redis') return 'redis-sentinel-failover needs --backend redis';
  const links = kinds.filter((k) => linkFaults.has(k));
  return links.length
    ? `redis-sentinel-failover cannot be combined with ${links.join(', ')} (the link proxies cannot stand in front of Sentinel)`
    : null;
}

/**
 * A small seeded PRNG (mulberry32), so a failing drill replays with --seed. Hand-written: ten
 * lines, and the drill needs nothing more than a reproducible stream of floats.
 */
export function seededRandom(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

/**
 * `count` faults (at least one of each chosen kind) in a seeded order: every kind equally often,
 * the remainder picked at random, so a long drill gives each kind enough samples.
 */
export function faultSchedule(kinds: FaultKind[], count: number, random: () => number): FaultKind[] {
  const total = Math.max(count, kinds.length);
  const out: FaultKind[] = [];
  for (let round = 0; round < Math.floor(total / kinds.length); round++) out.push(...kinds);
  while (out.length < total) out.push(kinds[Math.floor(random() * kinds.length)]!);
  for (let i = out.length - 1; i > 0; i--) {
    const j = Math.floor(random() * (i + 1));
    [out[i], out[j]] = [out[j]!, out[i]!];
  }
  return out;
}
