/**
 * One shard's view of the jobs: the fire loop and the stand-in of shard k see only the jobs whose
 * name hashes to k, and they see them as the underlying list changes (runtime schedules come and
 * go). The list is split into all shards in one pass, again only when the underlying list is a new
 * one, so a million jobs are hashed once per change, not once per shard per tick.
 */
import { InvalidArgumentError } from '../../errors.js';
import type { ScheduledJob, ScheduledJobs } from '../../cron/scheduled-job.js';
import { shardOf } from './shard-map.js';

export class ShardedJobs {
  private split: { from: readonly ScheduledJob[]; shards: ScheduledJob[][] } | undefined;

  constructor(
    private readonly all: ScheduledJobs,
    readonly shards: number,
  ) {}

  /** Shard `shard`'s jobs; with one shard, the jobs themselves. */
  view(shard: number): ScheduledJobs {
    if (this.shards === 1) return this.all;
    return {
      get: (name) => (shardOf(name, this.shards) === shard ? this.all.get(name) : undefined),
      require: (name) => {
        const job = this.all.require(name);
        // The replica routes every call by the job's shard; another shard's job here is a bug.
        if (shardOf(name, this.shards) !== shard)
          throw new InvalidArgumentError(`job "${name}" belongs to shard ${shardOf(name, this.shards)}, not ${shard}`);
        return job;
      },
      list: () => this.partition()[shard]!,
    };
  }

  private partition(): ScheduledJob[][] {
    const from = this.all.list();
    if (this.split?.from !== from) {
      const shards: ScheduledJob[][] = Array.from({ length: this.shards }, () => []);
      for (const job of from) shards[shardOf(job.name, this.shards)]!.push(job);
      this.split = { from, shards };
    }
    return this.split.shards;
  }
}
