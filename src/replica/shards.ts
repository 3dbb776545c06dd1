import type { EventEmitter } from 'node:events';
import type { ReplicaEvents } from '../admin/replica-view.js';
import type { Lease } from '../locks/lease.js';
import type { ElectorRole } from '../scheduler/election/elector.js';
import { shardOf } from '../scheduler/shards/shard-map.js';
import type { ShardLeadership } from './shard-leadership.js';

/**
 * This replica's leadership of every shard, taken as one: started, wound down and stopped
 * together, a job routed to its shard, and the role the replica shows (with one shard, the one
 * shard's).
 */
export class Shards {
  /** The role last announced (sharded). */
  private announced: ElectorRole | undefined;

  /** Sharded, `events` hears the replica's role: 'leader' while it leads any shard, announced when that changes. */
  constructor(
    readonly list: readonly ShardLeadership[],
    events: EventEmitter<ReplicaEvents>,
  ) {
    if (list.length === 1) return; // the one elector's role:changed is forwarded as it is
    for (const s of list)
      s.elector.on('role:changed', () => {
        if (this.role === this.announced) return;
        this.announced = this.role;
        events.emit('role:changed', this.role);
      });
  }

  get count(): number {
    return this.list.length;
  }
  /** Shard 0: the scheduler's, unsharded; its lease and fence carry the deployment's chores. */
  get first(): ShardLeadership {
    return this.list[0]!;
  }
  /** The shard that fires `job`, and may trigger, retry, backfill or run it once. */
  forJob(job: string): ShardLeadership {
    return this.list[shardOf(job, this.count)]!;
  }
  /** The lease names by shard when leadership is sharded; undefined with one shard. */
  get leaseNames(): readonly string[] | undefined {
    return this.count > 1 ? this.list.map((s) => s.leaseName) : undefined;
  }

  /** 'leader' while leading any shard, else shard 0's role. */
  get role(): ElectorRole {
    return this.list.some((s) => s.role === 'leader') ? 'leader' : this.first.role;
  }
  /** The shards this replica leads now. */
  led(): number[] {
    return this.list.filter((s) => s.role === 'leader').map((s) => s.shard);
  }
  /** Since when this replica leads (the earliest of its shards' tenures). */
  get leadingSince(): number | undefined {
    const since = this.list.map((s) => s.elector.leadingSince).filter((t): t is number => t !== undefined);
    return since.length > 0 ? Math.min(...since) : undefined;
  }
  /** The lease of the lowest shard this replica leads. */
  lease(): Lease | undefined {
    for (const s of this.list) {
      const lease = s.elector.lease();
      if (lease) return lease;
    }
    return undefined;
  }
  /** Give up every shard this replica leads; false when it leads none. */
  async resign(): Promise<boolean> {
    const resigned = await Promise.all(this.list.map((s) => s.elector.resign()));
    return resigned.some(Boolean);
  }

  start(): void {
    for (const s of this.list) s.start();
  }
  windDown(): void {
    for (const s of this.list) s.windDown();
  }
  async stop(): Promise<void> {
    await Promise.all(this.list.map((s) => s.stop()));
  }
  async flush(): Promise<void> {
    await Promise.all(this.list.map((s) => s.flush()));
  }
}
