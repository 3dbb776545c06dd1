import type { EventEmitter } from 'node:events';
import type { Logger } from 'pino';
import type { ReplicaEvents, RuntimeAdmin } from '../admin/replica-view.js';
import type { Clock } from '../clock.js';
import type { ScheduledJobs } from '../cron/scheduled-job.js';
import { InvalidArgumentError, NotLeaderError } from '../errors.js';
import type { BullmqDelivery } from '../jobs/bullmq-delivery.js';
import type { JobRegistry } from '../jobs/job-registry.js';
import type { CommittedFire, FireLedger } from '../ledger/fire-ledger.js';
import type { Ledger } from '../ledger/ledger.js';
import type { RetriedRun } from '../ledger/run-retry.js';
import type { OnceRun } from '../ledger/schedule-ledger.js';
import type { Lease, LeaseBackend } from '../locks/lease.js';
import { Elector, type ElectorRole } from '../scheduler/election/elector.js';
import type { ElectorOptions } from '../scheduler/election/elector-options.js';
import { Backfiller, type BackfillRequest, type BackfillStep } from '../scheduler/firing/backfill.js';
import { FireLoop, type FireLoopLedger } from '../scheduler/firing/fire-loop.js';
import { RunRetrier } from '../scheduler/firing/run-retrier.js';
import type { RuntimeSchedules } from '../scheduler/schedules/runtime-schedules.js';
import { shardFenceResource, shardLeaseName, shardOf } from '../scheduler/shards/shard-map.js';
import { StandIn } from '../scheduler/stand-in/stand-in.js';
import { forwardEvents } from './forward-events.js';
import { RuntimeOps } from './runtime-ops.js';
import { TenureRecord } from './tenure-record.js';

export interface ShardLeadershipOptions {
  shard: number;
  /** How many shards leadership is split into (1: this is the replica's one scheduler). */
  shardCount: number;
  namespace: string;
  replicaId: string;
  backend: LeaseBackend;
  election: Omit<ElectorOptions, 'leaseName' | 'replicaId'>;
  /** This shard's jobs (all of them with one shard). */
  jobs: ScheduledJobs;
  /** The jobs defined in code, for runtime schedules' validation. */
  registry: JobRegistry;
  ledger: Ledger;
  /** The ledger the fire loop commits through (runtime schedule fires named by version). */
  fireLedger: FireLoopLedger & Pick<FireLedger, 'markEnqueued'>;
  delivery: BullmqDelivery;
  schedules: RuntimeSchedules;
  standIn: {
    graceMs: number;
    perJob: number;
    /** The live followers, as last seen (member rows). */
    followers: () => readonly string[] | undefined;
    onCommitted: (fire: CommittedFire, latenessMs: number) => void;
  };
  clock: Clock;
  /** The shard's logger (with its shard number when sharded). */
  logger: Logger;
  warn: (kind: string, fields: object, message: string) => void;
  /** Awaited before a tenure plans, so its catch-up sees the runtime schedules as the ledger holds them now. */
  schedulesCurrent: () => Promise<void>;
  /** Started with each tenure, ended by its signal (shard 0: the leader's chores). */
  whileLeading?: (signal: AbortSignal) => void;
  /** Aborted once the replica winds down: a tenure that ends then re-arms no stand-in. */
  windingDown: AbortSignal;
  /** The replica, which announces this shard's elector and fire loop events as its own. */
  events: EventEmitter<ReplicaEvents>;
}

/**
 * One shard's leadership on this replica: its lease (elector) and fence, the fire loop over its
 * jobs while leading, the stand-in for its leader while following, and the leader-only actions on
 * its jobs (trigger, retry, one-off runs, backfills) under its fence. With one shard there is one
 * of these and it is the replica's scheduler.
 */
export class ShardLeadership {
  readonly shard: number;
  readonly leaseName: string;
  /** The ledger fence row that orders this shard's leaders. */
  readonly fenceResource: string;
  readonly elector: Elector;
  readonly fireLoop: FireLoop;
  readonly standIn: StandIn;
  /** Runtime schedules' changes (any replica) and this shard's one-off runs and backfills (its leader). */
  readonly runtime: RuntimeAdmin;
  private readonly retrier: RunRetrier;
  private readonly tenures: TenureRecord;
  /** Monotonic ms when this replica's current tenure began; undefined while not leading. */
  private wonAtValue: number | undefined;

  constructor(private readonly o: ShardLeadershipOptions) {
    this.shard = o.shard;
    this.leaseName = shardLeaseName(o.namespace, o.shard, o.shardCount);
    this.fenceResource = shardFenceResource(this.leaseName);
    const { replicaId, clock, logger, delivery } = o;
    const leadership = (this.elector = new Elector(
      o.backend,
      { ...o.election, leaseName: this.leaseName, replicaId },
      {
        beforeCampaign: () => this.raiseTokenFloor(),
        onStartedLeading: (lease, signal) => this.lead(lease, signal),
        onStoppedLeading: () => this.follow(),
      },
      clock,
    ));
    const stamp = { leadership, clock, logger, replicaId, fenceResource: this.fenceResource };
    this.fireLoop = new FireLoop({
      ...stamp,
      registry: o.jobs,
      ledger: o.fireLedger,
      delivery,
      owns: o.shardCount > 1 ? (job) => shardOf(job, o.shardCount) === o.shard : undefined,
    });
    this.standIn = new StandIn({
      ...stamp,
      registry: o.jobs,
      ledger: o.ledger.fires,
      delivery,
      policies: this.fireLoop,
      annotate: (fires) => o.schedules.annotate(fires),
      isLeading: () => this.elector.role === 'leader',
      graceMs: o.standIn.graceMs,
      leaseTtlMs: o.election.ttlMs,
      perJob: o.standIn.perJob,
      followers: o.standIn.followers,
      onCommitted: o.standIn.onCommitted,
    });
    this.retrier = new RunRetrier({ ...stamp, ledger: o.ledger.fires, delivery });
    const backfiller = new Backfiller({ ...stamp, registry: o.jobs, ledger: o.fireLedger, delivery });
    this.runtime = new RuntimeOps({
      ...stamp,
      registry: o.registry,
      ledger: o.ledger,
      delivery,
      schedules: o.schedules,
      backfiller,
    });
    this.tenures = new TenureRecord({ db: o.ledger.pool, tables: o.ledger.tables, logger, warn: o.warn });
    // Stamps each tenure's renewals and end in cw_elections (the console's handover times).
    this.elector.on('lease:renewed', (lease) => this.tenures.renewed(lease));
    this.elector.on('lease:lost', (lease, _reason, end) => this.tenures.ended(lease, end));
    // Sharded, the replica announces its own role: leader while it leads any shard (Shards).
    forwardEvents(o.events, this.elector, this.fireLoop, logger, o.warn, o.shardCount === 1);
  }

  get role(): ElectorRole {
    return this.elector.role;
  }
  /** Monotonic ms when this replica's current tenure of the shard began; undefined while not leading. */
  get wonAt(): number | undefined {
    return this.wonAtValue;
  }

  /** Campaign, and stand in for the leader meanwhile. */
  start(): void {
    this.elector.start();
    void this.standIn.start();
  }
  /** Stop firing and standing in: the first step of a stop or a failed start. */
  windDown(): void {
    this.fireLoop.stop();
    this.standIn.stop();
  }
  /** End the campaign or tenure, releasing the lease. */
  stop(): Promise<void> {
    return this.elector.stop();
  }
  /** Wait for tenure stamps in flight (before the ledger's pool closes). */
  flush(): Promise<void> {
    return this.tenures.flush();
  }

  trigger(job: string): Promise<CommittedFire> {
    return this.refusedHere(() => this.fireLoop.trigger(job));
  }
  retry(runId: bigint): Promise<RetriedRun> {
    return this.refusedHere(() => this.retrier.retry(runId));
  }
  once(job: string, o: { at: Date; key: string; payload: unknown }): Promise<OnceRun> {
    return this.refusedHere(() => this.runtime.once(job, o));
  }
  backfill(r: BackfillRequest): Promise<BackfillStep> {
    return this.refusedHere(() => this.runtime.backfill(r));
  }

  /** The while-leading hook: stamp the election, start the chores, then fire until the tenure ends. */
  private async lead(lease: Lease, signal: AbortSignal): Promise<void> {
    this.o.logger.info({ token: lease.token.toString() }, 'elected leader');
    this.wonAtValue = this.o.clock.monotonic();
    // The leader fires; its stand-in would only repeat the fire loop's work for a million jobs.
    this.standIn.stop();
    await this.o.ledger.fires
      .recordElection(this.leaseName, this.o.replicaId, lease.token, this.o.backend.kind)
      .then((id) => this.tenures.elected(id, lease.token))
      .catch((err: Error) => this.o.logger.warn({ err }, 'could not record the election'));
    this.o.whileLeading?.(signal);
    await this.o.schedulesCurrent();
    if (signal.aborted) return;
    await this.fireLoop.lead(signal);
  }

  private follow(): void {
    this.wonAtValue = undefined;
    this.fireLoop.stop();
    // A follower again: stand in for whoever leads next (re-armed in slices).
    if (!this.o.windingDown.aborted) void this.standIn.start();
  }

  /**
   * Before campaigning, make the backend's next token exceed the highest token the ledger accepted,
   * so a Redis that restarted without persistence cannot hand out a token the fence would refuse.
   */
  private async raiseTokenFloor(): Promise<void> {
    const highest = await this.o.ledger.fires.fenceToken(this.fenceResource);
    if (highest === null) return;
    try {
      await this.o.backend.ensureTokenAbove(this.leaseName, highest);
    } catch (err) {
      if (!(err instanceof InvalidArgumentError)) throw err;
      this.o.logger.error({ err, highest: highest.toString() }, 'backend cannot honour the ledger token floor');
    }
  }

  /** A leader-only action refused because this replica does not lead the shard: the error names its lease. */
  private async refusedHere<T>(action: () => Promise<T>): Promise<T> {
    try {
      return await action();
    } catch (err) {
      if (err instanceof NotLeaderError && err.leaseName === undefined)
        throw new NotLeaderError(err.message, this.leaseName);
      throw err;
    }
  }
}
