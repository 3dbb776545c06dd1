import { EventEmitter } from 'node:events';
import { readFileSync } from 'node:fs';
import { hostname } from 'node:os';
import { randomUUID } from 'node:crypto';
import pg from 'pg';
import { Redis } from 'ioredis';
import { pino, type Logger } from 'pino';
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
import { Elector, type ElectorRole } from '../scheduler/elector.js';
import { FireLoop, type FireLoopLedger } from '../scheduler/fire-loop.js';
import type { FireLedger } from '../ledger/fire-ledger.js';
import { Ledger } from '../ledger/ledger.js';
import { LedgerClock } from '../scheduler/ledger-clock.js';
import { RunRetention } from '../scheduler/run-retention.js';
import { DeliverySweeper } from '../scheduler/delivery-sweeper.js';
import { RemovedJobs } from '../scheduler/removed-jobs.js';
import { RuntimeSchedules, withRuntimeSchedules } from '../scheduler/runtime-schedules.js';
import { ScheduleSync } from '../scheduler/schedule-sync.js';
import { Backfiller } from '../scheduler/backfill.js';
import { RuntimeOps } from './runtime-ops.js';
import { DEFAULT_STAND_IN_GRACE_MS, DEFAULT_STAND_INS_PER_JOB, StandIn } from '../scheduler/stand-in.js';
import { PauseExpiry } from '../scheduler/pause-expiry.js';
import type { JobPause, PauseRequest } from '../ledger/pauses.js';
import { settlesWithin } from '../settles-within.js';
import { limitedWarn } from '../once-per-kind.js';
import { forwardEvents } from './forward-events.js';
import { MemberHeartbeat } from './member-heartbeat.js';
import { TenureRecord } from './tenure-record.js';
import { RunRetrier } from '../scheduler/run-retrier.js';
import type { RetriedRun } from '../ledger/run-retry.js';
import type { ReplicaAdminOptions, ReplicaOptions } from './replica-options.js';

export type { ReplicaAdminOptions, ReplicaOptions } from './replica-options.js';
export type { ReplicaEvents } from '../admin/replica-view.js';
import { DEFAULT_NAMESPACE, resolveSchema } from '../db/tables.js';
import { reportClientErrors } from '../db/client-errors.js';
import { ledgerConnection } from '../db/ledger-url.js';

/** Warn when this host's wall clock is further than this from the ledger's. */
const HOST_CLOCK_WARN_MS = 1000;
/** How long stop() waits for the ledger's pool to drain. */
const POOL_END_TIMEOUT_MS = 2000;

/** This package's version, advertised in cw_members. */
const PACKAGE_VERSION = (
  JSON.parse(readFileSync(new URL('../../package.json', import.meta.url), 'utf8')) as { version: string }
).version;

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
  readonly leaseName: string;
  readonly registry: JobRegistry;
  readonly ledger: Ledger;
  readonly elector: Elector;
  readonly fireLoop: FireLoop;
  /** The jobs the leader fires and a follower stands in for: from code, and the runtime schedules. */
  readonly schedules: RuntimeSchedules;
  /** Runtime schedules, one-off runs and backfills for the admin API. */
  readonly runtime: RuntimeOps;
  /** Keeps `schedules` current from start to stop, on every replica (the stand-in needs them too). */
  readonly scheduleSync: ScheduleSync;
  private readonly syncStop = new AbortController();
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
  private readonly retention: RunRetention | undefined;
  private readonly sweeper: DeliverySweeper;
  private readonly removedJobs: RemovedJobs;
  private readonly standIn: StandIn;
  private readonly retrier: RunRetrier;
  private readonly tenures: TenureRecord;
  private readonly pauseExpiry: PauseExpiry;
  private stopped = false;
  /** Warnings that could repeat many times a second (reconnects, a flapping backend), rate-limited. */
  private readonly warn: ReturnType<typeof limitedWarn>;

  constructor(private readonly o: ReplicaOptions) {
    super();
    requireConnections(o);
    this.replicaId = o.replicaId ?? `${hostname()}-${process.pid}-${randomUUID().slice(0, 6)}`;
    this.namespace = o.namespace ?? DEFAULT_NAMESPACE;
    this.schema = resolveSchema({ schema: o.schema, namespace: this.namespace });
    this.leaseName = `cronwarden/${this.namespace}/scheduler`;
    this.registry = o.jobs instanceof JobRegistry ? o.jobs : new JobRegistry(o.jobs);
    this.logger = (o.logger ?? pino({ name: 'cronwarden' })).child({ replica: this.replicaId });
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
    ({ retention: this.retention, sweeper: this.sweeper, removedJobs: this.removedJobs } = this.leaderChores(clock));
    const fenceResource = `scheduler/${this.leaseName}`;

    this.elector = this.newElector(clock, fenceResource);
    this.schedules = new RuntimeSchedules({
      code: this.registry,
      ledger: this.ledger.schedules,
      clock,
      logger: this.logger,
    });
    const fireLedger = withRuntimeSchedules(this.ledger.fires, this.schedules);
    this.fireLoop = this.newFireLoop(fireLedger, clock, fenceResource);
    this.runtime = this.runtimeOps(fireLedger, fenceResource);
    this.standIn = this.newStandIn(clock, fenceResource);
    this.scheduleSync = new ScheduleSync({
      pool: this.pool,
      channel: this.ledger.tables.scheduleChannel,
      schedules: this.schedules,
      planners: [this.fireLoop, this.standIn],
      clock,
      logger: this.logger,
    });
    this.pauseExpiry = new PauseExpiry({
      ledger: this.ledger.fires,
      leadership: this.elector,
      clock,
      logger: this.logger,
      fenceResource,
      onResumed: (pause) => this.emit('pause:expired', pause),
    });
    this.executor = new RunExecutor({
      ledger: this.ledger.runs,
      registry: this.registry,
      replicaId: this.replicaId,
      logger: this.logger,
    });
    this.retrier = this.newRetrier(fenceResource);
    this.tenures = this.newTenureRecord();
    forwardEvents(this, this.elector, this.fireLoop, this.logger, this.warn);
  }

  /** Stamps each tenure's renewals and end in cw_elections (the console's handover times). */
  private newTenureRecord(): TenureRecord {
    const tenures = new TenureRecord({
      db: this.pool,
      tables: this.ledger.tables,
      logger: this.logger,
      warn: this.warn,
    });
    this.on('lease:renewed', (lease) => tenures.renewed(lease));
    this.on('lease:lost', (lease, _reason, end) => tenures.ended(lease, end));
    return tenures;
  }

  /** Connection errors of the clients we made are logged, rate-limited; the caller's are theirs. */
  private watchOwnConnections(): void {
    if (this.ownsPool)
      this.pool.on('error', (err) => this.warn(`pg:${err.message}`, { err }, 'idle PostgreSQL connection error'));
    if (this.ownsRedis)
      this.redis.on('error', (err) => this.warn(`redis:${err.message}`, { err }, 'Redis connection error'));
  }

  private newRetrier(fenceResource: string): RunRetrier {
    return new RunRetrier({
      ledger: this.ledger.fires,
      delivery: this.delivery,
      leadership: this.elector,
      logger: this.logger,
      replicaId: this.replicaId,
      fenceResource,
    });
  }

  private newElector(clock: Clock, fenceResource: string): Elector {
    return new Elector(
      this.o.backend,
      { ...this.o.election, leaseName: this.leaseName, replicaId: this.replicaId },
      {
        beforeCampaign: () => this.raiseTokenFloor(fenceResource),
        onStartedLeading: (lease, signal) => this.onLeading(lease, signal),
        onStoppedLeading: () => {
          this.fireLoop.stop();
          // A follower again: stand in for whoever leads next (re-armed in slices).
          if (!this.stopped) void this.standIn.start();
        },
      },
      clock,
    );
  }

  private newFireLoop(ledger: FireLoopLedger, clock: Clock, fenceResource: string): FireLoop {
    return new FireLoop({
      registry: this.schedules,
      ledger,
      delivery: this.delivery,
      leadership: this.elector,
      clock,
      logger: this.logger,
      replicaId: this.replicaId,
      fenceResource,
    });
  }

  /** The leader's periodic chores: retention, the re-delivery sweep, removed jobs' runs. */
  private leaderChores(clock: Clock): {
    retention: RunRetention | undefined;
    sweeper: DeliverySweeper;
    removedJobs: RemovedJobs;
  } {
    const o = this.o;
    const retentionMs = o.retentionMs ?? 14 * 24 * 3600 * 1000;
    if (!(retentionMs >= 0))
      throw new InvalidArgumentError(`retentionMs must be 0 (keep everything) or positive, got ${retentionMs}`);
    return {
      retention:
        retentionMs > 0
          ? new RunRetention({ ledger: this.ledger.fires, clock, logger: this.logger, retentionMs })
          : undefined,
      sweeper: new DeliverySweeper({
        ledger: this.ledger.fires,
        delivery: this.delivery,
        clock,
        logger: this.logger,
        ...o.redelivery,
      }),
      removedJobs: new RemovedJobs({
        ledger: this.ledger.fires,
        db: this.pool,
        tables: this.ledger.tables,
        clock,
        logger: this.logger,
        ...o.removedJobs,
      }),
    };
  }

  /** The follower's stand-in for a silent leader (see stand-in.ts). */
  private newStandIn(clock: Clock, fenceResource: string): StandIn {
    return new StandIn({
      registry: this.schedules,
      ledger: this.ledger.fires,
      delivery: this.delivery,
      policies: this.fireLoop,
      annotate: (fires) => this.schedules.annotate(fires),
      isLeading: () => this.elector.role === 'leader',
      clock,
      logger: this.logger,
      replicaId: this.replicaId,
      fenceResource,
      graceMs: this.o.standInGraceMs ?? DEFAULT_STAND_IN_GRACE_MS,
      perJob: this.o.standInsPerJob ?? DEFAULT_STAND_INS_PER_JOB,
      followers: () => this.heartbeat?.followers,
      onCommitted: (fire, latenessMs) => this.emit('fire:committed', fire, latenessMs, fire.trigger),
    });
  }

  /** Runtime schedules' changes, one-off runs and backfills, as the admin API drives them. */
  private runtimeOps(fireLedger: FireLoopLedger & Pick<FireLedger, 'markEnqueued'>, fenceResource: string): RuntimeOps {
    const stamp = { leadership: this.elector, clock: this.clock, logger: this.logger, replicaId: this.replicaId };
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
        registry: this.schedules,
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

  get role(): ElectorRole {
    return this.elector.role;
  }

  // The admin view (ReplicaView): what the admin server and the metrics may see and do.
  get backendKind(): string {
    return this.o.backend.kind;
  }
  get ttlMs(): number {
    return this.elector.options.ttlMs;
  }
  get leadingSince(): number | undefined {
    return this.elector.leadingSince;
  }
  lease(): Lease | undefined {
    return this.elector.lease();
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
  async pingLedger(): Promise<void> {
    await this.pool.query('SELECT 1');
  }
  trigger(job: string): Promise<CommittedFire> {
    return this.fireLoop.trigger(job);
  }
  setPaused(job: string, paused: boolean): Promise<void> {
    return this.ledger.fires.setPaused(job, paused);
  }
  pause(job: string, request: PauseRequest): Promise<JobPause> {
    return this.ledger.fires.pause(job, request);
  }
  resign(): Promise<boolean> {
    return this.elector.resign();
  }
  retry(runId: bigint): Promise<RetriedRun> {
    return this.retrier.retry(runId);
  }

  async start(): Promise<void> {
    // An admin thread loads its modules while the rest starts; it is closed if start-up fails.
    this.admin = this.createAdmin();
    try {
      await this.startParts();
    } catch (err) {
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
    if (this.o.worker?.enabled !== false) {
      this.worker = new BullmqWorker({
        redisUrl: this.o.redisUrl,
        redis: this.o.redis,
        namespace: this.namespace,
        executor: this.executor,
        logger: this.logger,
        concurrency: this.o.worker?.concurrency,
        lockDurationMs: this.o.worker?.lockDurationMs,
        stalledIntervalMs: this.o.worker?.stalledIntervalMs,
      });
      this.executor.setPublisher(this.worker.publisherFor());
      await this.worker.start();
    }
    // Runtime schedules load beside the rest; a tenure waits for them (onLeading) before it plans.
    this.schedulesLoaded = this.scheduleSync.start(this.syncStop.signal).then((loaded) => {
      if (loaded > 0) this.logger.info({ schedules: loaded }, 'runtime schedules loaded');
      return loaded;
    });
    this.elector.start();
    void this.standIn.start();
    await this.startAdmin();
  }

  /** The admin HTTP, if configured: in a thread of its own (the default) when the ledger is a URL. */
  private createAdmin(): AdminServer | AdminThread | undefined {
    const a: ReplicaAdminOptions | undefined = this.o.admin === false ? undefined : this.o.admin;
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
    const a: ReplicaAdminOptions | undefined = this.o.admin === false ? undefined : this.o.admin;
    if (a && this.admin) {
      const bound = await this.admin.listen();
      this.adminUrl = a.url ?? advertised(bound, a.host ?? '127.0.0.1');
    }
    this.heartbeat = new MemberHeartbeat({
      pool: this.pool,
      tables: this.ledger.tables,
      replicaId: this.replicaId,
      role: () => this.role,
      version: this.o.version ?? PACKAGE_VERSION,
      jobs: () => this.registry.list(),
      adminUrl: this.adminUrl,
      logger: this.logger,
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
    this.fireLoop.stop();
    this.standIn.stop();
    this.syncStop.abort();
    await this.elector.stop();
    await this.heartbeat?.stop();
    await this.admin?.close();
    await this.worker?.close(this.o.shutdownGraceMs ?? 10_000);
    await this.delivery.close();
    if (this.ownsRedis) await this.redis.quit().catch(() => {});
    await this.o.backend.close();
    await this.tenures.flush();
    this.ledgerClock?.stop();
    // An abandoned handler may still hold a pooled client (e.g. inside ctx.transaction): do not
    // wait for it; exiting the process ends its session and PostgreSQL rolls its transaction back.
    if (this.ownsPool && !(await settlesWithin(this.pool.end(), POOL_END_TIMEOUT_MS))) {
      this.logger.warn('a PostgreSQL client is still checked out by an abandoned handler; not waiting for it');
    }
    this.logger.info('replica stopped');
  }

  private async onLeading(lease: Lease, signal: AbortSignal): Promise<void> {
    this.logger.info({ token: lease.token.toString() }, 'elected leader');
    // The leader fires; its stand-in would only repeat the fire loop's work for a million jobs.
    this.standIn.stop();
    await this.ledger.fires
      .recordElection(this.leaseName, this.replicaId, lease.token, this.o.backend.kind)
      .then((id) => this.tenures.elected(id, lease.token))
      .catch((err: Error) => {
        this.logger.warn({ err }, 'could not record the election');
      });
    void this.retention?.run(signal);
    void this.sweeper.run(signal);
    void this.removedJobs.run(signal);
    void this.pauseExpiry.run(signal);
    // The tenure's catch-up plans with runtime schedules as the ledger holds them now.
    await this.schedulesLoaded;
    await this.scheduleSync.current();
    if (signal.aborted) return;
    await this.fireLoop.lead(signal);
  }

  /**
   * Before campaigning, make the backend's next token exceed the highest token the ledger accepted,
   * so a Redis that restarted without persistence cannot hand out a token the fence would refuse.
   */
  private async raiseTokenFloor(fenceResource: string): Promise<void> {
    const highest = await this.ledger.fires.fenceToken(fenceResource);
    if (highest === null) return;
    try {
      await this.o.backend.ensureTokenAbove(this.leaseName, highest);
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

/** A replica needs a lease backend, the ledger's PostgreSQL and Redis (given as URLs or clients). */
function requireConnections(o: ReplicaOptions): void {
  if (!o.backend) throw new InvalidArgumentError('a lease backend is required');
  if (!o.databaseUrl && !o.pool)
    throw new InvalidArgumentError('databaseUrl or pool is required (the ledger lives in PostgreSQL)');
  if (!o.redisUrl && !o.redis)
    throw new InvalidArgumentError('redisUrl or redis is required (runs are delivered through BullMQ)');
}
