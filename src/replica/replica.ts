import { EventEmitter } from 'node:events';
import { hostname } from 'node:os';
import pg from 'pg';
import { Redis } from 'ioredis';
import type { Logger } from 'pino';
import { AdminServer } from '../admin/server.js';
import { AdminThread } from '../admin/admin-thread.js';
import type { ReplicaEvents, ReplicaView } from '../admin/replica-view.js';
import { systemClock, type Clock } from '../clock.js';
import { InvalidArgumentError } from '../errors.js';
import type { JobDefinition } from '../jobs/define-job.js';
import type { CommittedFire } from '../ledger/fire-ledger.js';
import { JobRegistry } from '../jobs/job-registry.js';
import { BullmqDelivery } from '../jobs/bullmq-delivery.js';
import { BullmqWorker } from '../jobs/bullmq-worker.js';
import { RunExecutor } from '../jobs/run-executor.js';
import type { Lease } from '../locks/lease.js';
import { runDetail } from '../ledger/run-reads.js';
import type { LiveMember } from '../ledger/members.js';
import type { RuntimeAdmin } from '../admin/replica-view.js';
import { ShardedJobs } from '../scheduler/shards/shard-jobs.js';
import { shardFenceResource, shardLeaseName, shardOf } from '../scheduler/shards/shard-map.js';
import { shardsToHandBack } from '../scheduler/shards/shard-balance.js';
import type { ScheduledJobs } from '../cron/scheduled-job.js';
import { onShard, type ShardLeader } from './shard-leader.js';
import { ShardedRuntime } from './sharded-runtime.js';
import { Elector, type ElectorRole } from '../scheduler/election/elector.js';
import { FireLoop, type FireLoopLedger } from '../scheduler/firing/fire-loop.js';
import type { FireLedger } from '../ledger/fire-ledger.js';
import { Ledger } from '../ledger/ledger.js';
import { LedgerClock } from '../scheduler/election/ledger-clock.js';
import { ChoreRunner } from '../scheduler/chores/chore.js';
import { RuntimeSchedules, withRuntimeSchedules } from '../scheduler/schedules/runtime-schedules.js';
import { ScheduleSync } from '../scheduler/schedules/schedule-sync.js';
import { Backfiller } from '../scheduler/firing/backfill.js';
import { RuntimeOps } from './runtime-ops.js';
import { StandIn } from '../scheduler/stand-in/stand-in.js';
import type { JobPause, PauseRequest } from '../ledger/pauses.js';
import { settlesWithin } from '../settles-within.js';
import { limitedWarn } from '../once-per-kind.js';
import { forwardEvents } from './forward-events.js';
import { leaderChores } from './leader-chores.js';
import { MemberHeartbeat } from './member-heartbeat.js';
import { TenureRecord } from './tenure-record.js';
import { RunRetrier } from '../scheduler/firing/run-retrier.js';
import type { RetriedRun } from '../ledger/run-retry.js';
import type { ReplicaOptions } from './replica-options.js';

export type { ReplicaAdminOptions, ReplicaOptions } from './replica-options.js';
export type { ReplicaEvents } from '../admin/replica-view.js';
import { resolveReplicaOptions, type ResolvedReplicaOptions } from './replica-defaults.js';
import { reportClientErrors } from '../db/client-errors.js';
import { ledgerConnection } from '../db/ledger-url.js';

/** Warn when this host's wall clock is further than this from the ledger's. */
const HOST_CLOCK_WARN_MS = 1000;
/** Sharded: how long stop() waits for its member row to go before it releases its shards. */
const MEMBER_DELETE_WAIT_MS = 250;
/** How long stop() waits for the ledger's pool to drain. */
const POOL_END_TIMEOUT_MS = 2000;

/**
 * One cronwarden replica, the composition root: campaigns for leadership, fires while leading,
 * executes runs always, serves the admin HTTP and keeps its member row. `cronwarden start` is
 * this class plus configuration and signal handling.
 */
export class Replica extends EventEmitter<ReplicaEvents> implements ReplicaView {
  readonly replicaId: string;
  readonly namespace: string;
  /** The PostgreSQL schema of this deployment's ledger. */
  readonly schema: string;
  /** The scheduler's lease (shard 0's, when leadership is sharded). */
  readonly leaseName: string;
  readonly registry: JobRegistry;
  readonly ledger: Ledger;
  /** How many shards leadership is split into (1: one leader fires every job). */
  readonly shardCount: number;
  /** Each shard's leadership on this replica, by shard (one with one shard). */
  readonly shards: readonly ShardLeader[];
  /** The shards' lease names when leadership is sharded (more than one); undefined otherwise. */
  readonly shardLeases: readonly string[] | undefined;
  /** Shard 0's elector: the scheduler's, unsharded. */
  readonly elector: Elector;
  /** Shard 0's fire loop: the scheduler's, unsharded. */
  readonly fireLoop: FireLoop;
  /** The jobs the leader fires and a follower stands in for: from code, and the runtime schedules. */
  readonly schedules: RuntimeSchedules;
  /** Runtime schedules, one-off runs and backfills for the admin API (routed by the job's shard). */
  readonly runtime: RuntimeAdmin;
  /** Keeps `schedules` current from start to stop, on every replica (the stand-in needs them too). */
  readonly scheduleSync: ScheduleSync;
  /** Aborted as a stop or a failed start begins: schedule sync ends, a tenure's end re-arms no stand-in. */
  private readonly windingDown = new AbortController();
  /** The schedules' first load, which a tenure waits for before it plans. */
  private schedulesLoaded: Promise<number> = Promise.resolve(0);
  readonly logger: Logger;
  readonly startedAt: number;
  private readonly pool: pg.Pool;
  private readonly redis: Redis;
  /** Clients the caller gave us stay open on stop(); ours are closed. */
  private readonly ownsPool: boolean;
  private readonly ownsRedis: boolean;
  private admin: AdminServer | AdminThread | undefined;
  private heartbeat: MemberHeartbeat | undefined;
  /** Where this replica's admin HTTP answers, once started (undefined without one). */
  adminUrl: string | undefined;
  /** Where its probe listener answers /healthz and /readyz, once started (undefined without one). */
  get probeUrl(): string | undefined {
    return this.admin?.probeUrl;
  }
  private readonly delivery: BullmqDelivery;
  private readonly executor: RunExecutor;
  private worker: BullmqWorker | undefined;
  /** Set when the scheduler keeps time by the ledger's clock (the default). */
  readonly ledgerClock: LedgerClock | undefined;
  /** The scheduler's clock: the ledger's, unless one was given. */
  readonly clock: Clock;
  /** The leader's chores, run by shard 0's tenures. */
  private readonly chores: ChoreRunner;
  private stopped = false;
  /** The aggregate role last announced (sharded: 'leader' while leading any shard). */
  private announcedRole: ElectorRole | undefined;
  private balancing = false;
  /** Warnings that could repeat many times a second (reconnects, a flapping backend), rate-limited. */
  private readonly warn: ReturnType<typeof limitedWarn>;

  /** The options with every default filled and every value checked (replica-defaults.ts). */
  private readonly o: ResolvedReplicaOptions;

  constructor(options: ReplicaOptions) {
    super();
    const o = (this.o = resolveReplicaOptions(options));
    this.replicaId = o.replicaId;
    this.namespace = o.namespace;
    this.schema = o.schema;
    this.shardCount = o.shards;
    this.leaseName = shardLeaseName(this.namespace, 0, this.shardCount);
    this.registry = o.jobs instanceof JobRegistry ? o.jobs : new JobRegistry(o.jobs);
    this.logger = o.logger.child({ replica: this.replicaId });
    this.startedAt = (o.clock ?? systemClock).now();
    this.warn = limitedWarn(this.logger, () => (o.clock ?? systemClock).monotonic());
    this.ownsPool = !o.pool;
    this.pool = o.pool ?? new pg.Pool({ ...ledgerConnection(o.databaseUrl!), max: 10, connectionTimeoutMillis: 5000 });
    reportClientErrors(this.pool, (err) =>
      this.warn(`pg-client:${err.message}`, { err }, 'PostgreSQL connection lost'),
    );
    this.ledger = new Ledger(this.pool, this.schema);
    this.ledgerClock = o.clock ? undefined : this.newLedgerClock();
    const clock = o.clock ?? this.ledgerClock!;
    this.clock = clock;
    this.ownsRedis = !o.redis;
    this.redis = o.redis ?? new Redis(o.redisUrl!, { maxRetriesPerRequest: 2 });
    this.watchOwnConnections();
    this.delivery = new BullmqDelivery({
      connection: this.redis,
      namespace: this.namespace,
      registry: this.registry,
      ledger: this.ledger,
    });
    this.schedules = new RuntimeSchedules({
      code: this.registry,
      ledger: this.ledger.schedules,
      clock,
      logger: this.logger,
    });
    const fireLedger = withRuntimeSchedules(this.ledger.fires, this.schedules);
    const split = new ShardedJobs(this.schedules, this.shardCount);
    this.shards = Array.from({ length: this.shardCount }, (_, shard) =>
      this.newShard(shard, split.view(shard), fireLedger, clock),
    );
    const first = this.shards[0]!;
    this.elector = first.elector;
    this.fireLoop = first.fireLoop;
    this.shardLeases = this.shardCount > 1 ? this.shards.map((s) => s.leaseName) : undefined;
    this.runtime = this.shardCount > 1 ? new ShardedRuntime(this.shards, first.runtime) : first.runtime;
    this.scheduleSync = new ScheduleSync({
      pool: this.pool,
      channel: this.ledger.tables.scheduleChannel,
      schedules: this.schedules,
      planners: [...this.shards.map((s) => s.fireLoop), ...this.shards.map((s) => s.standIn)],
      clock,
      logger: this.logger,
    });
    // The leader's chores for the whole deployment run under shard 0's lease and fence.
    const chores = leaderChores({
      ...o,
      ledger: this.ledger,
      delivery: this.delivery,
      leadership: first.elector,
      fenceResource: first.fenceResource,
      clock,
      logger: this.logger,
      onPauseExpired: (pause) => this.emit('pause:expired', pause),
    });
    this.chores = new ChoreRunner(chores, { clock, logger: this.logger });
    this.executor = new RunExecutor({
      ledger: this.ledger.runs,
      registry: this.registry,
      replicaId: this.replicaId,
      logger: this.logger,
    });
  }

  /** One shard's elector, fire loop, stand-in and leader-only actions, under its own lease and fence. */
  private newShard(
    shard: number,
    jobs: ScheduledJobs,
    fireLedger: FireLoopLedger & Pick<FireLedger, 'markEnqueued'>,
    clock: Clock,
  ): ShardLeader {
    const leaseName = shardLeaseName(this.namespace, shard, this.shardCount);
    const fenceResource = shardFenceResource(leaseName);
    const sharded = this.shardCount > 1;
    const logger = sharded ? this.logger.child({ shard }) : this.logger;
    const elector = this.newElector(clock, leaseName, fenceResource, () => unit);
    const fireLoop = new FireLoop({
      registry: jobs,
      ledger: fireLedger,
      delivery: this.delivery,
      leadership: elector,
      clock,
      logger,
      replicaId: this.replicaId,
      fenceResource,
      owns: sharded ? (job) => shardOf(job, this.shardCount) === shard : undefined,
    });
    const unit: ShardLeader = {
      shard,
      leaseName,
      fenceResource,
      jobs,
      elector,
      fireLoop,
      standIn: this.newStandIn(clock, jobs, fireLoop, elector, fenceResource, logger),
      retrier: new RunRetrier({
        ledger: this.ledger.fires,
        delivery: this.delivery,
        leadership: elector,
        logger,
        replicaId: this.replicaId,
        fenceResource,
      }),
      runtime: this.runtimeOps(jobs, fireLedger, elector, fenceResource),
      tenures: new TenureRecord({ db: this.pool, tables: this.ledger.tables, logger, warn: this.warn }),
      wonAt: undefined,
    };
    // Stamps each tenure's renewals and end in cw_elections (the console's handover times).
    elector.on('lease:renewed', (lease) => unit.tenures.renewed(lease));
    elector.on('lease:lost', (lease, _reason, end) => unit.tenures.ended(lease, end));
    forwardEvents(this, elector, fireLoop, logger, this.warn, !sharded);
    if (sharded) elector.on('role:changed', () => this.announceRole());
    return unit;
  }

  /** Sharded: the replica's role is 'leader' while it leads any shard; announced when that changes. */
  private announceRole(): void {
    const role = this.role;
    if (role === this.announcedRole) return;
    this.announcedRole = role;
    this.emit('role:changed', role);
  }

  /** Connection errors of the clients we made are logged, rate-limited; the caller's are theirs. */
  private watchOwnConnections(): void {
    if (this.ownsPool)
      this.pool.on('error', (err) => this.warn(`pg:${err.message}`, { err }, 'idle PostgreSQL connection error'));
    if (this.ownsRedis)
      this.redis.on('error', (err) => this.warn(`redis:${err.message}`, { err }, 'Redis connection error'));
  }

  /** `unit` is the shard the elector campaigns for (made after it: its parts need the elector). */
  private newElector(clock: Clock, leaseName: string, fenceResource: string, unit: () => ShardLeader): Elector {
    return new Elector(
      this.o.backend,
      { ...this.o.election, leaseName, replicaId: this.replicaId },
      {
        beforeCampaign: () => this.raiseTokenFloor(leaseName, fenceResource),
        onStartedLeading: (lease, signal) => this.onLeading(unit(), lease, signal),
        onStoppedLeading: () => {
          const u = unit();
          u.wonAt = undefined;
          u.fireLoop.stop();
          // A follower again: stand in for whoever leads next (re-armed in slices).
          if (!this.windingDown.signal.aborted) void u.standIn.start();
        },
      },
      clock,
    );
  }

  /** The follower's stand-in for a silent leader of the shard (see stand-in.ts). */
  private newStandIn(
    clock: Clock,
    jobs: ScheduledJobs,
    fireLoop: FireLoop,
    elector: Elector,
    fenceResource: string,
    logger: Logger,
  ): StandIn {
    return new StandIn({
      registry: jobs,
      ledger: this.ledger.fires,
      delivery: this.delivery,
      policies: fireLoop,
      annotate: (fires) => this.schedules.annotate(fires),
      isLeading: () => elector.role === 'leader',
      clock,
      logger,
      replicaId: this.replicaId,
      fenceResource,
      graceMs: this.o.standInGraceMs,
      perJob: this.o.standInsPerJob,
      followers: () => this.heartbeat?.followers,
      onCommitted: (fire, latenessMs) => this.emit('fire:committed', fire, latenessMs, fire.trigger),
    });
  }

  /** Runtime schedules' changes, one-off runs and backfills of a shard's jobs, as the admin API drives them. */
  private runtimeOps(
    jobs: ScheduledJobs,
    fireLedger: FireLoopLedger & Pick<FireLedger, 'markEnqueued'>,
    leadership: Elector,
    fenceResource: string,
  ): RuntimeOps {
    const stamp = { leadership, clock: this.clock, logger: this.logger, replicaId: this.replicaId };
    return new RuntimeOps({
      ...stamp,
      fenceResource,
      registry: this.registry,
      ledger: this.ledger,
      delivery: this.delivery,
      schedules: this.schedules,
      backfiller: new Backfiller({
        ...stamp,
        fenceResource,
        registry: jobs,
        ledger: fireLedger,
        delivery: this.delivery,
      }),
    });
  }

  /** The scheduler's default clock: the ledger's time, with a warning when this host's differs much. */
  private newLedgerClock(): LedgerClock {
    return new LedgerClock({
      readServerTime: () => this.ledger.serverTime(),
      onSync: ({ hostOffsetMs, errorMs }) => {
        if (Math.abs(hostOffsetMs) > HOST_CLOCK_WARN_MS)
          this.logger.warn(
            { hostOffsetMs, errorMs },
            'host clock differs from the ledger clock; scheduling by the ledger clock',
          );
      },
      onError: (err) =>
        this.logger.warn({ err: err.message }, 'could not read the ledger clock; keeping the last sync'),
    });
  }

  /** Unsharded: the elector's role. Sharded: 'leader' while leading any shard, else shard 0's role. */
  get role(): ElectorRole {
    if (this.shardCount > 1 && this.shards.some((s) => s.elector.role === 'leader')) return 'leader';
    return this.elector.role;
  }

  /** The shards this replica leads now. */
  ledShards(): number[] {
    return this.shards.filter((s) => s.elector.role === 'leader').map((s) => s.shard);
  }

  /** The shard that fires `job`, and may trigger, retry, backfill or run it once. */
  private shardOf(job: string): ShardLeader {
    return this.shards[shardOf(job, this.shardCount)]!;
  }

  // The admin view (ReplicaView): what the admin server and the metrics may see and do.
  get backendKind(): string {
    return this.o.backend.kind;
  }
  get ttlMs(): number {
    return this.elector.options.ttlMs;
  }
  get leadingSince(): number | undefined {
    const since = this.shards.map((s) => s.elector.leadingSince).filter((t): t is number => t !== undefined);
    return since.length > 0 ? Math.min(...since) : undefined;
  }
  /** The lease while leading (sharded: of the lowest shard this replica leads). */
  lease(): Lease | undefined {
    for (const s of this.shards) {
      const lease = s.elector.lease();
      if (lease) return lease;
    }
    return undefined;
  }
  jobs(): readonly JobDefinition[] {
    return this.registry.list();
  }
  job(name: string): JobDefinition | undefined {
    return this.registry.get(name);
  }
  hostOffsetMs(): number | undefined {
    return this.ledgerClock?.hostOffsetMs();
  }
  pingLedger(): Promise<void> {
    return this.ledger.ping();
  }
  trigger(job: string): Promise<CommittedFire> {
    const shard = this.shardOf(job);
    return onShard(shard, () => shard.fireLoop.trigger(job));
  }
  setPaused(job: string, paused: boolean): Promise<void> {
    return this.ledger.fires.setPaused(job, paused);
  }
  pause(job: string, request: PauseRequest): Promise<JobPause> {
    return this.ledger.fires.pause(job, request);
  }
  /** Give up every shard this replica leads; false when it leads none. */
  async resign(): Promise<boolean> {
    const resigned = await Promise.all(this.shards.map((s) => s.elector.resign()));
    return resigned.some(Boolean);
  }
  async retry(runId: bigint): Promise<RetriedRun> {
    // Sharded: the run's job says whose fence the retry goes under (an unknown run: shard 0 says so).
    const run = this.shardCount > 1 ? await runDetail(this.pool, this.ledger.tables, runId) : null;
    const shard = run ? this.shardOf(run.job) : this.shards[0]!;
    return onShard(shard, () => shard.retrier.retry(runId));
  }

  async start(): Promise<void> {
    // An admin thread loads its modules while the rest starts; it is closed if start-up fails.
    this.admin = this.createAdmin();
    try {
      await this.startParts();
    } catch (err) {
      // A campaign already begun (or a lease already won) is given up before the error goes out.
      this.windDown();
      await Promise.all(this.shards.map((s) => s.elector.stop()));
      await this.admin?.close().catch(() => undefined);
      this.admin = undefined;
      throw err;
    }
    this.logger.info(
      { jobs: this.registry.size, backend: this.o.backend.kind, namespace: this.namespace, schema: this.schema },
      'replica started',
    );
  }

  private async startParts(): Promise<void> {
    // Before anything runs: a schema that holds another deployment's ledger is refused here.
    await this.ledger.bindNamespace(this.namespace);
    await this.ledgerClock?.start();
    // Runtime schedules load beside the rest; a tenure waits for them (onLeading) before it plans.
    this.schedulesLoaded = this.scheduleSync.start(this.windingDown.signal).then((loaded) => {
      if (loaded > 0) this.logger.info({ schedules: loaded }, 'runtime schedules loaded');
      return loaded;
    });
    // Campaign before the worker and the admin HTTP start: leading needs neither, and on a starved
    // host every second of start-up before the campaign is a second a crashed leader goes unreplaced.
    for (const s of this.shards) s.elector.start();
    for (const s of this.shards) void s.standIn.start();
    this.logger.info({ sinceProcessStartMs: Math.round(process.uptime() * 1000) }, 'campaigning for leadership');
    if (this.o.worker.enabled) {
      this.worker = new BullmqWorker({
        redisUrl: this.o.redisUrl,
        redis: this.o.redis,
        namespace: this.namespace,
        executor: this.executor,
        logger: this.logger,
        concurrency: this.o.worker.concurrency,
        lockDurationMs: this.o.worker.lockDurationMs,
        stalledIntervalMs: this.o.worker.stalledIntervalMs,
      });
      this.executor.setPublisher(this.worker.publisherFor());
      await this.worker.start();
    }
    await this.startAdmin();
  }

  /** The admin HTTP, if configured: in a thread of its own (the default) when the ledger is a URL. */
  private createAdmin(): AdminServer | AdminThread | undefined {
    const a = this.o.admin;
    if (!a) return undefined;
    const admin = {
      replica: this,
      backend: this.o.backend,
      token: a.token,
      host: a.host,
      port: a.port,
      advertisedUrl: a.url,
      allowedHosts: a.allowedHosts,
      probe: a.probe,
    };
    // A pool's settings (functions, a Client class) cannot cross to a thread: then in this one.
    if (a.thread !== false && this.o.databaseUrl)
      return new AdminThread({ ...admin, databaseUrl: this.o.databaseUrl, niceness: a.niceness });
    return new AdminServer({
      ...admin,
      // pg.Pool keeps the config it was made with; the admin pool copies its connection settings.
      databaseUrl: this.o.databaseUrl ?? (this.pool as pg.Pool & { options: pg.PoolConfig }).options,
    });
  }

  /** The admin HTTP, if configured, and this replica's member row with the URL it advertises. */
  private async startAdmin(): Promise<void> {
    const a = this.o.admin;
    if (a && this.admin) {
      const bound = await this.admin.listen();
      this.adminUrl = a.url ?? advertised(bound, a.host);
    }
    const sharded = this.shardCount > 1;
    this.heartbeat = new MemberHeartbeat({
      pool: this.pool,
      tables: this.ledger.tables,
      replicaId: this.replicaId,
      role: () => this.role,
      version: this.o.version,
      jobs: () => this.registry.list(),
      adminUrl: this.adminUrl,
      logger: this.logger,
      // Sharded: the balancer needs to see a dead replica gone within a TTL, so beat thrice a TTL.
      intervalMs: sharded ? Math.min(3000, Math.max(100, Math.floor(this.ttlMs / 3))) : undefined,
      everyoneStandsIn: sharded,
      onBeat: sharded ? (members) => void this.balance(members) : undefined,
    });
    this.on('role:changed', () => void this.heartbeat?.beat());
    await this.heartbeat.start();
  }

  /**
   * Graceful stop: stop firing, resign (a follower takes over at once), let running handlers
   * finish up to the grace period, hand interrupted runs back to the queue, then close every
   * connection. Bounded even when a handler ignores its signal (see BullmqWorker.close).
   */
  async stop(): Promise<void> {
    if (this.stopped) return;
    this.stopped = true;
    // The hand-over first: stop firing and release the lease, so a follower leads at once. Only
    // then the admin HTTP (whose close waits for in-flight requests) and the member row.
    this.windDown();
    // Sharded: the member row goes first, so the others' balancers stop counting this replica as
    // one with room before its shards come free (else they hand shards "to" it). Bounded: a ledger
    // that does not answer must not hold up the hand-over.
    const memberGone = this.shardCount > 1 ? this.heartbeat?.stop() : undefined;
    if (memberGone) await settlesWithin(memberGone, MEMBER_DELETE_WAIT_MS);
    await Promise.all(this.shards.map((s) => s.elector.stop()));
    await (memberGone ?? this.heartbeat?.stop());
    await this.admin?.close();
    await this.worker?.close(this.o.shutdownGraceMs);
    await this.delivery.close();
    if (this.ownsRedis) await this.redis.quit().catch(() => {});
    await this.o.backend.close();
    await Promise.all(this.shards.map((s) => s.tenures.flush()));
    this.ledgerClock?.stop();
    // An abandoned handler may still hold a pooled client (e.g. inside ctx.transaction): do not
    // wait for it; exiting the process ends its session and PostgreSQL rolls its transaction back.
    if (this.ownsPool && !(await settlesWithin(this.pool.end(), POOL_END_TIMEOUT_MS))) {
      this.logger.warn('a PostgreSQL client is still checked out by an abandoned handler; not waiting for it');
    }
    this.logger.info('replica stopped');
  }

  /** Stop firing, standing in and loading schedules: the first step of a stop or a failed start. */
  private windDown(): void {
    for (const s of this.shards) {
      s.fireLoop.stop();
      s.standIn.stop();
    }
    this.windingDown.abort();
  }

  private async onLeading(unit: ShardLeader, lease: Lease, signal: AbortSignal): Promise<void> {
    const shard = this.shardCount > 1 ? { shard: unit.shard } : {};
    this.logger.info({ token: lease.token.toString(), ...shard }, 'elected leader');
    unit.wonAt = this.clock.monotonic();
    // The leader fires; its stand-in would only repeat the fire loop's work for a million jobs.
    unit.standIn.stop();
    await this.ledger.fires
      .recordElection(unit.leaseName, this.replicaId, lease.token, this.o.backend.kind)
      .then((id) => unit.tenures.elected(id, lease.token))
      .catch((err: Error) => {
        this.logger.warn({ err, ...shard }, 'could not record the election');
      });
    if (unit.shard === 0) void this.chores.run(signal);
    // The tenure's catch-up plans with runtime schedules as the ledger holds them now.
    await this.schedulesLoaded;
    await this.scheduleSync.current();
    if (signal.aborted) return;
    await unit.fireLoop.lead(signal);
  }

  /**
   * Sharded: after each member beat, hand back the shards above this replica's fair share while
   * another live replica leads fewer (shard-balance.ts). Live: beat within a TTL, so a replica that
   * died stops counting about when its leases expire; fresh (may take a shard): beat within 1.5
   * beats. Holders are read from the lease backend; if a read fails, nothing is handed back this time.
   */
  private async balance(members: readonly LiveMember[]): Promise<void> {
    if (this.balancing || this.stopped) return;
    this.balancing = true;
    try {
      const ttl = this.ttlMs;
      const holders = await Promise.all(this.shards.map((s) => this.o.backend.current(s.leaseName))).catch(
        () => undefined,
      );
      if (!holders || this.stopped) return;
      const mine = this.shards
        .filter((s) => s.elector.role === 'leader' && s.wonAt !== undefined)
        .map((s) => ({ shard: s.shard, wonAt: s.wonAt! }));
      const beat = this.heartbeat?.intervalMs ?? ttl;
      const handBack = shardsToHandBack({
        shards: this.shardCount,
        me: this.replicaId,
        live: members.filter((m) => m.ageMs <= ttl).map((m) => m.replicaId),
        fresh: members.filter((m) => m.ageMs <= 1.5 * beat).map((m) => m.replicaId),
        holders: holders.map((h) => h?.holder ?? null),
        mine,
      });
      for (const shard of handBack) {
        this.logger.info(
          { shard, leading: mine.length },
          'handing a shard back: this replica leads more than its share',
        );
        // Back in the race after a beat: long enough for a replica with room to take it.
        await this.shards[shard]!.elector.resign(beat);
      }
    } finally {
      this.balancing = false;
    }
  }

  /**
   * Before campaigning, make the backend's next token exceed the highest token the ledger accepted,
   * so a Redis that restarted without persistence cannot hand out a token the fence would refuse.
   */
  private async raiseTokenFloor(leaseName: string, fenceResource: string): Promise<void> {
    const highest = await this.ledger.fires.fenceToken(fenceResource);
    if (highest === null) return;
    try {
      await this.o.backend.ensureTokenAbove(leaseName, highest);
    } catch (err) {
      if (!(err instanceof InvalidArgumentError)) throw err;
      this.logger.error({ err, highest: highest.toString() }, 'backend cannot honour the ledger token floor');
    }
  }
}

/** A wildcard bind (0.0.0.0, ::) is advertised under this machine's host name. */
function advertised(bound: string, host: string): string {
  if (host !== '0.0.0.0' && host !== '::') return bound;
  const port = new URL(bound.replace(/\[.*\]/, 'localhost')).port;
  return `http://${hostname()}:${port}`;
}
