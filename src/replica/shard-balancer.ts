import type { Logger } from 'pino';
import type { LiveMember } from '../ledger/members.js';
import type { LeaseBackend } from '../locks/lease.js';
import { shardsToHandBack } from '../scheduler/shards/shard-balance.js';
import type { ShardLeadership } from './shard-leadership.js';

export interface ShardBalancerOptions {
  shards: readonly ShardLeadership[];
  backend: Pick<LeaseBackend, 'current'>;
  replicaId: string;
  ttlMs: number;
  /** The member heartbeat's interval, once it beats. */
  beatMs: () => number | undefined;
  logger: Logger;
}

/**
 * Sharded: after each member beat, hand back the shards above this replica's fair share while
 * another live replica leads fewer (shard-balance.ts holds the rule). Live: beat within a TTL, so
 * a replica that died stops counting about when its leases expire; fresh (may take a shard): beat
 * within 1.5 beats. Holders are read from the lease backend; if a read fails, nothing is handed
 * back this time.
 */
export class ShardBalancer {
  private balancing = false;
  private stopped = false;

  constructor(private readonly o: ShardBalancerOptions) {}

  /** No more hand-backs: the replica is stopping. */
  stop(): void {
    this.stopped = true;
  }

  async balance(members: readonly LiveMember[]): Promise<void> {
    if (this.balancing || this.stopped) return;
    this.balancing = true;
    try {
      const { shards, ttlMs } = this.o;
      const holders = await Promise.all(shards.map((s) => this.o.backend.current(s.leaseName))).catch(() => undefined);
      if (!holders || this.stopped) return;
      const mine = shards
        .filter((s) => s.role === 'leader' && s.wonAt !== undefined)
        .map((s) => ({ shard: s.shard, wonAt: s.wonAt! }));
      const beat = this.o.beatMs() ?? ttlMs;
      const handBack = shardsToHandBack({
        shards: shards.length,
        me: this.o.replicaId,
        live: members.filter((m) => m.ageMs <= ttlMs).map((m) => m.replicaId),
        fresh: members.filter((m) => m.ageMs <= 1.5 * beat).map((m) => m.replicaId),
        holders: holders.map((h) => h?.holder ?? null),
        mine,
      });
      for (const shard of handBack) {
        this.o.logger.info(
          { shard, leading: mine.length },
          'handing a shard back: this replica leads more than its share',
        );
        // Back in the race after a beat: long enough for a replica with room to take it.
        await shards[shard]!.elector.resign(beat);
      }
    } finally {
      this.balancing = false;
    }
  }
}
