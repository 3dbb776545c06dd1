import { NotLeaderError } from '../errors.js';
import type { Elector } from '../scheduler/election/elector.js';
import type { FireLoop } from '../scheduler/firing/fire-loop.js';
import type { RunRetrier } from '../scheduler/firing/run-retrier.js';
import type { ScheduledJobs } from '../cron/scheduled-job.js';
import type { StandIn } from '../scheduler/stand-in/stand-in.js';
import type { RuntimeOps } from './runtime-ops.js';
import type { TenureRecord } from './tenure-record.js';

/**
 * Everything one shard's leadership needs on this replica: its own lease (elector), fence, fire
 * loop over its jobs, stand-in for its leader, and the leader-only admin actions on its jobs
 * (trigger, retry, one-off runs, backfills) under its fence. With one shard there is one of these
 * and it is the replica's scheduler as it always was.
 */
export interface ShardLeader {
  readonly shard: number;
  readonly leaseName: string;
  /** The ledger fence row that orders this shard's leaders. */
  readonly fenceResource: string;
  /** This shard's jobs (all of them with one shard). */
  readonly jobs: ScheduledJobs;
  readonly elector: Elector;
  readonly fireLoop: FireLoop;
  readonly standIn: StandIn;
  readonly retrier: RunRetrier;
  readonly runtime: RuntimeOps;
  readonly tenures: TenureRecord;
  /** Monotonic ms when this replica's current tenure of the shard began; undefined while not leading. */
  wonAt: number | undefined;
}

/**
 * A leader-only action on a shard's job; refused because this replica does not lead the shard, the
 * error names the shard's lease, so the admin API's 409 points at that shard's leader.
 */
export async function onShard<T>(shard: ShardLeader, action: () => Promise<T>): Promise<T> {
  try {
    return await action();
  } catch (err) {
    if (err instanceof NotLeaderError && err.leaseName === undefined)
      throw new NotLeaderError(err.message, shard.leaseName);
    throw err;
  }
}
