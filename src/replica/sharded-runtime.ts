import type { RuntimeAdmin } from '../admin/replica-view.js';
import type { OnceRun, StoredSchedule } from '../ledger/schedule-ledger.js';
import type { BackfillRequest, BackfillStep } from '../scheduler/firing/backfill.js';
import { shardOf } from '../scheduler/shards/shard-map.js';
import type { ShardLeadership } from './shard-leadership.js';

/**
 * The admin API's runtime actions with sharded leadership: schedule changes work on any replica
 * (the ledger serialises them), one-off runs and backfills commit fires, so they go to the job's
 * shard, under its fence; refused there, the error names that shard's lease.
 */
export class ShardedRuntime implements RuntimeAdmin {
  constructor(
    private readonly shards: readonly ShardLeadership[],
    private readonly any: RuntimeAdmin,
  ) {}

  create(id: string, input: unknown, actor: string): Promise<StoredSchedule> {
    return this.any.create(id, input, actor);
  }
  update(id: string, input: unknown, actor: string): Promise<StoredSchedule> {
    return this.any.update(id, input, actor);
  }
  setPaused(id: string, paused: boolean, actor: string): Promise<StoredSchedule> {
    return this.any.setPaused(id, paused, actor);
  }
  delete(id: string, actor: string): Promise<StoredSchedule> {
    return this.any.delete(id, actor);
  }
  once(job: string, o: { at: Date; key: string; payload: unknown }): Promise<OnceRun> {
    return this.shardOf(job).once(job, o);
  }
  backfill(r: BackfillRequest): Promise<BackfillStep> {
    return this.shardOf(r.job).backfill(r);
  }

  private shardOf(job: string): ShardLeadership {
    return this.shards[shardOf(job, this.shards.length)]!;
  }
}
