/**
 * How sharded leadership spreads: every replica campaigns for every shard (so a crashed leader's
 * shards are taken within a TTL by whoever is waiting), and a replica that leads more than its fair
 * share, ceil(shards / live replicas), hands the excess back (resigns) while another live replica
 * leads fewer than that share. Only the excess moves: a failover moves the failed replica's shards,
 * a joining replica takes a share from those above it, and nobody else's shards change hands.
 *
 * Shards are handed only to replicas that beat within the last beat or so (`fresh`): a replica that
 * just died still counts as live for the share until its row is a TTL old, but it stops looking fresh
 * at once, so no shard is handed "to" it only to bounce between the survivors. The most recently won
 * go first, so after a failover it is the failed replica's shards that move on, not the ones the
 * survivors already led.
 */
import { fairShare } from './shard-map.js';

export interface BalanceView {
  shards: number;
  /** This replica. */
  me: string;
  /** Replicas seen alive within a TTL (this one included or not): the fair share counts them. */
  live: readonly string[];
  /** Of those, the ones that beat within about one beat: only they are counted as able to take a shard. */
  fresh: readonly string[];
  /** Each shard's current holder (null: none), as the lease backend says. */
  holders: readonly (string | null)[];
  /** The shards this replica leads and since when (monotonic ms). */
  mine: readonly { shard: number; wonAt: number }[];
}

/** The shards this replica should resign now, most recently won first; empty when balanced. */
export function shardsToHandBack(v: BalanceView): number[] {
  const live = new Set(v.live);
  live.add(v.me);
  const share = fairShare(v.shards, live.size);
  const excess = v.mine.length - share;
  if (excess <= 0) return [];
  const led = new Map<string, number>();
  for (const h of v.holders) if (h !== null && live.has(h)) led.set(h, (led.get(h) ?? 0) + 1);
  let room = 0;
  for (const r of new Set(v.fresh)) if (r !== v.me && live.has(r)) room += Math.max(0, share - (led.get(r) ?? 0));
  if (room === 0) return [];
  return [...v.mine]
    .sort((a, b) => b.wonAt - a.wonAt || b.shard - a.shard)
    .slice(0, Math.min(excess, room))
    .map((m) => m.shard);
}
