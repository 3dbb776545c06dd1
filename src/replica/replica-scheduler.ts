import type { EventEmitter } from 'node:events';
import type { Logger } from 'pino';
import type { ReplicaEvents, RuntimeAdmin } from '../admin/replica-view.js';
import type { Clock } from '../clock.js';
import type { BullmqDelivery } from '../jobs/bullmq-delivery.js';
import type { JobRegistry } from '../jobs/job-registry.js';
import type { Ledger } from '../ledger/ledger.js';
import type { LiveMember } from '../ledger/members.js';
import { ChoreRunner } from '../scheduler/chores/chore.js';
import { RuntimeSchedules, withRuntimeSchedules } from '../scheduler/schedules/runtime-schedules.js';
import { ScheduleSync } from '../scheduler/schedules/schedule-sync.js';
import { ShardedJobs } from '../scheduler/shards/shard-jobs.js';
import { leaderChores } from './leader-chores.js';
import type { ResolvedReplicaOptions } from './replica-defaults.js';
import { ShardBalancer } from './shard-balancer.js';
import { ShardLeadership, type ShardLeadershipOptions } from './shard-leadership.js';
import { ShardedRuntime } from './sharded-runtime.js';
import { Shards } from './shards.js';

export interface ReplicaSchedulerOptions {
  /** The replica's options, resolved. */
  options: ResolvedReplicaOptions;
  registry: JobRegistry;
  ledger: Ledger;
  delivery: BullmqDelivery;
  clock: Clock;
  logger: Logger;
  warn: ShardLeadershipOptions['warn'];
  /** The replica: it announces the shards' events, stand-in fires and lifted pauses as its own. */
  events: EventEmitter<ReplicaEvents>;
  /** The live followers, as the member heartbeat last saw them. */
  followers: () => readonly string[] | undefined;
  /** The member heartbeat's interval, once it beats. */
  beatMs: () => number | undefined;
  /** Workflow steps' waits past their timeout, on the leader (a chore). */
  timeOutWaits: () => Promise<number>;
}

/**
 * The scheduling half of a replica: each shard's leadership, the leader's chores under shard 0's
 * tenures, the runtime schedules kept current for leaders and stand-ins alike, and (sharded) the
 * balancing of shards among the replicas.
 */
export class ReplicaScheduler {
  /** This replica's leadership of each shard (one shard: the scheduler's). */
  readonly shards: Shards;
  /** The jobs the leader fires and a follower stands in for: from code, and the runtime schedules. */
  readonly schedules: RuntimeSchedules;
  /** Keeps `schedules` current from start to stop, on every replica (the stand-in needs them too). */
  readonly scheduleSync: ScheduleSync;
  /** Runtime schedules, one-off runs and backfills for the admin API (routed by the job's shard). */
  readonly runtime: RuntimeAdmin;
  readonly balancer: ShardBalancer;
  private readonly chores: ChoreRunner;
  /** Aborted as a stop or a failed start begins: schedule sync ends, a tenure's end re-arms no stand-in. */
  private readonly windingDown = new AbortController();
  /** The schedules' first load, which a tenure waits for before it plans. */
  private schedulesLoaded: Promise<number> = Promise.resolve(0);

  constructor(private readonly o: ReplicaSchedulerOptions) {
    const { options, ledger, clock, logger } = o;
    this.schedules = new RuntimeSchedules({ code: o.registry, ledger: ledger.schedules, clock, logger });
    const split = new ShardedJobs(this.schedules, options.shards);
    const fireLedger = withRuntimeSchedules(ledger.fires, this.schedules);
    const list = Array.from({ length: options.shards }, (_, n) => this.newShard(n, split.view(n), fireLedger));
    this.shards = new Shards(list, o.events);
    const first = this.shards.first;
    this.runtime = options.shards > 1 ? new ShardedRuntime(list, first.runtime) : first.runtime;
    // The leader's chores for the whole deployment run under shard 0's lease and fence.
    const chores = leaderChores({
      ...options,
      ledger,
      delivery: o.delivery,
      leadership: first.elector,
      fenceResource: first.fenceResource,
      clock,
      logger,
      onPauseExpired: (pause) => o.events.emit('pause:expired', pause),
      timeOutWaits: o.timeOutWaits,
      workerLockMs: options.worker.lockDurationMs,
      timeouts: () =>
        o.registry
          .list()
          .filter((j) => j.timeoutMs > 0)
          .map((j) => ({ job: j.name, timeoutMs: j.timeoutMs })),
    });
    this.chores = new ChoreRunner(chores, { clock, logger });
    this.scheduleSync = new ScheduleSync({
      pool: ledger.pool,
      channel: ledger.tables.scheduleChannel,
      schedules: this.schedules,
      planners: [...list.map((s) => s.fireLoop), ...list.map((s) => s.standIn)],
      clock,
      logger,
    });
    const { ttlMs } = options.election;
    this.balancer = new ShardBalancer({ ...options, shards: list, ttlMs, beatMs: o.beatMs, logger });
  }

  private newShard(
    shard: number,
    jobs: ShardLeadershipOptions['jobs'],
    fireLedger: ShardLeadershipOptions['fireLedger'],
  ): ShardLeadership {
    const { options, events } = this.o;
    return new ShardLeadership({
      ...this.o,
      namespace: options.namespace,
      replicaId: options.replicaId,
      backend: options.backend,
      election: options.election,
      shard,
      shardCount: options.shards,
      jobs,
      fireLedger,
      schedules: this.schedules,
      standIn: {
        graceMs: options.standInGraceMs,
        perJob: options.standInsPerJob,
        followers: this.o.followers,
        onCommitted: (fire, latenessMs) => events.emit('fire:committed', fire, latenessMs, fire.trigger),
      },
      logger: options.shards > 1 ? this.o.logger.child({ shard }) : this.o.logger,
      schedulesCurrent: async () => {
        await this.schedulesLoaded;
        await this.scheduleSync.current();
      },
      whileLeading: shard === 0 ? (signal) => void this.chores.run(signal) : undefined,
      windingDown: this.windingDown.signal,
    });
  }

  /** Load the runtime schedules and keep them current, and campaign for every shard. */
  start(): void {
    // Runtime schedules load beside the rest; a tenure waits for them (schedulesCurrent) before it plans.
    this.schedulesLoaded = this.scheduleSync.start(this.windingDown.signal).then((loaded) => {
      if (loaded > 0) this.o.logger.info({ schedules: loaded }, 'runtime schedules loaded');
      return loaded;
    });
    this.shards.start();
  }

  /** Stop firing, standing in, loading schedules and balancing: the first step of a stop or a failed start. */
  windDown(): void {
    this.balancer.stop();
    this.shards.windDown();
    this.windingDown.abort();
  }

  /** Sharded: after each member beat, hand back the shards above this replica's share. */
  balance(members: readonly LiveMember[]): void {
    void this.balancer.balance(members);
  }
}
