import { EventEmitter } from 'node:events';
import { hostname } from 'node:os';
import { randomUUID } from 'node:crypto';
import pg from 'pg';
import { Redis } from 'ioredis';
import { pino, type Logger } from 'pino';
import { systemClock, type Clock } from '../clock.js';
import { InvalidArgumentError } from '../errors.js';
import type { JobDefinition } from '../jobs/define-job.js';
import { JobRegistry } from '../jobs/job-registry.js';
import { BullmqDelivery } from '../jobs/bullmq-delivery.js';
import { BullmqWorker } from '../jobs/bullmq-worker.js';
import { RunExecutor } from '../jobs/run-executor.js';
import type { Lease, LeaseBackend } from '../locks/lease.js';
import { Elector, type ElectorRole } from '../scheduler/elector.js';
import type { ElectorOptions } from '../scheduler/elector-options.js';
import { FireLoop, type FireLoopEvents } from '../scheduler/fire-loop.js';
import { Ledger } from '../ledger/ledger.js';
import { LedgerClock } from '../scheduler/ledger-clock.js';
import { RunRetention } from '../scheduler/run-retention.js';
import { DeliverySweeper } from '../scheduler/delivery-sweeper.js';
import { settlesWithin } from '../settles-within.js';
import { DEFAULT_NAMESPACE, resolveSchema } from '../db/tables.js';

/** Warn when this host's wall clock is further than this from the ledger's. */
const HOST_CLOCK_WARN_MS = 1000;
/** How long stop() waits for the ledger's pool to drain. */
const POOL_END_TIMEOUT_MS = 2000;

export interface ReplicaOptions {
  /** Unique per process. Default: host-pid-random. */
  replicaId?: string;
  /**
   * Separates deployments sharing one Redis/Postgres/etcd: queue, lease and election names carry
   * it, and the ledger lives in its own schema. Default "default".
   */
  namespace?: string;
  /**
   * PostgreSQL schema holding this deployment's ledger (src/db/tables.ts). Default: "cronwarden"
   * for the default namespace, else "cronwarden_<namespace>". Migrate it first (`cronwarden
   * migrate` with the same namespace or schema); a schema holding another namespace is refused.
   */
  schema?: string;
  backend: LeaseBackend;
  /** PostgreSQL holding the ledger (migrated: see `cronwarden migrate`). */
  databaseUrl: string;
  /** Redis for BullMQ delivery. */
  redisUrl: string;
  jobs: JobDefinition[] | JobRegistry;
  election?: Omit<ElectorOptions, 'leaseName' | 'replicaId'>;
  worker?: { enabled?: boolean; concurrency?: number; lockDurationMs?: number; stalledIntervalMs?: number };
  /**
   * How long running handlers may finish on shutdown before their signal aborts. Default 10 s.
   * A run stopped this way is recorded as interrupted and handed to another replica (no retry is
   * used up); a handler that ignores its signal is abandoned about a second later, so stop()
   * returns within roughly the grace period plus a few seconds.
   */
  shutdownGraceMs?: number;
  /**
   * The leader deletes finished runs (and their attempts) older than this. Default 14 days; 0
   * keeps everything.
   */
  retentionMs?: number;
  /**
   * The leader's re-delivery sweep: a handed-over run still active after `checkAfterMs` (default
   * 30 s) is looked up in the queue; lost ones are handed over again, ones the queue failed
   * without an outcome in the ledger are settled failed. Checked every `intervalMs` (default 5 s).
   */
  redelivery?: { checkAfterMs?: number; intervalMs?: number; batchSize?: number };
  /**
   * Time for the scheduler. Default: the ledger's PostgreSQL clock (see LedgerClock), so skew or
   * a jump of this host's wall clock cannot make it fire early, late or twice.
   */
  clock?: Clock;
  logger?: Logger;
}

export type ReplicaEvents = FireLoopEvents & {
  'role:changed': [role: ElectorRole];
  'lease:acquired': [lease: Lease];
  'lease:renewed': [lease: Lease, latencyMs: number];
  'lease:lost': [lease: Lease, reason: string];
  'backend:error': [error: Error];
};

/** One cronwarden replica: campaigns for leadership, fires while leading, executes runs always. */
export class Replica extends EventEmitter<ReplicaEvents> {
  readonly replicaId: string;
  readonly namespace: string;
  /** The PostgreSQL schema of this deployment's ledger. */
  readonly schema: string;
  readonly leaseName: string;
  readonly registry: JobRegistry;
  readonly ledger: Ledger;
  readonly elector: Elector;
  readonly fireLoop: FireLoop;
  readonly logger: Logger;
  readonly startedAt: number;
  private readonly pool: pg.Pool;
  private readonly redis: Redis;
  private readonly delivery: BullmqDelivery;
  private readonly executor: RunExecutor;
  private worker: BullmqWorker | undefined;
  /** Set when the scheduler keeps time by the ledger's clock (the default). */
  readonly ledgerClock: LedgerClock | undefined;
  /** The scheduler's clock: the ledger's, unless one was given. */
  readonly clock: Clock;
  private readonly retention: RunRetention | undefined;
  private readonly sweeper: DeliverySweeper;
  private stopped = false;

  constructor(private readonly o: ReplicaOptions) {
    super();
    if (!o.backend) throw new InvalidArgumentError('a lease backend is required');
    if (!o.databaseUrl) throw new InvalidArgumentError('databaseUrl is required (the ledger lives in PostgreSQL)');
    if (!o.redisUrl) throw new InvalidArgumentError('redisUrl is required (runs are delivered through BullMQ)');
    this.replicaId = o.replicaId ?? `${hostname()}-${process.pid}-${randomUUID().slice(0, 6)}`;
    this.namespace = o.namespace ?? DEFAULT_NAMESPACE;
    this.schema = resolveSchema({ schema: o.schema, namespace: this.namespace });
    this.leaseName = `cronwarden/${this.namespace}/scheduler`;
    this.registry = o.jobs instanceof JobRegistry ? o.jobs : new JobRegistry(o.jobs);
    this.logger = (o.logger ?? pino({ name: 'cronwarden' })).child({ replica: this.replicaId });
    this.startedAt = (o.clock ?? systemClock).now();
    this.pool = new pg.Pool({ connectionString: o.databaseUrl, max: 10, connectionTimeoutMillis: 5000 });
    this.pool.on('error', (err) => this.logger.warn({ err }, 'idle PostgreSQL connection error'));
    this.ledger = new Ledger(this.pool, this.schema);
    this.ledgerClock = o.clock
      ? undefined
      : new LedgerClock({
          readServerTime: () => this.ledger.serverTime(),
          onSync: ({ hostOffsetMs, errorMs }) => {
            if (Math.abs(hostOffsetMs) > HOST_CLOCK_WARN_MS) this.logger.warn({ hostOffsetMs, errorMs }, 'host clock differs from the ledger clock; scheduling by the ledger clock');
          },
          onError: (err) => this.logger.warn({ err: err.message }, 'could not read the ledger clock; keeping the last sync'),
        });
    const clock = o.clock ?? this.ledgerClock!;
    this.clock = clock;
    const retentionMs = o.retentionMs ?? 14 * 24 * 3600 * 1000;
    if (!(retentionMs >= 0)) throw new InvalidArgumentError(`retentionMs must be 0 (keep everything) or positive, got ${retentionMs}`);
    this.retention = retentionMs > 0 ? new RunRetention({ ledger: this.ledger.fires, clock, logger: this.logger, retentionMs }) : undefined;
    this.redis = new Redis(o.redisUrl, { maxRetriesPerRequest: 2 });
    this.redis.on('error', (err) => this.logger.warn({ err }, 'Redis connection error'));
    this.delivery = new BullmqDelivery({ connection: this.redis, namespace: this.namespace, registry: this.registry, ledger: this.ledger });
    this.sweeper = new DeliverySweeper({ ledger: this.ledger.fires, delivery: this.delivery, clock, logger: this.logger, ...o.redelivery });
    const fenceResource = `scheduler/${this.leaseName}`;

    this.elector = new Elector(
      o.backend,
      { ...o.election, leaseName: this.leaseName, replicaId: this.replicaId },
      {
        beforeCampaign: () => this.raiseTokenFloor(fenceResource),
        onStartedLeading: (lease, signal) => this.onLeading(lease, signal),
        onStoppedLeading: () => this.fireLoop.stop(),
      },
      clock,
    );
    this.fireLoop = new FireLoop({
      registry: this.registry,
      ledger: this.ledger.fires,
      delivery: this.delivery,
      leadership: this.elector,
      clock,
      logger: this.logger,
      replicaId: this.replicaId,
      fenceResource,
    });
    this.executor = new RunExecutor({ ledger: this.ledger.runs, registry: this.registry, replicaId: this.replicaId, logger: this.logger });
    this.forward();
  }

  get role(): ElectorRole {
    return this.elector.role;
  }

  async start(): Promise<void> {
    // Before anything runs: a schema that holds another deployment's ledger is refused here.
    await this.ledger.bindNamespace(this.namespace);
    await this.ledgerClock?.start();
    if (this.o.worker?.enabled !== false) {
      this.worker = new BullmqWorker({
        redisUrl: this.o.redisUrl,
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
    this.elector.start();
    this.logger.info({ jobs: this.registry.size, backend: this.o.backend.kind, namespace: this.namespace, schema: this.schema }, 'replica started');
  }

  /**
   * Graceful stop: stop firing, resign (a follower takes over at once), let running handlers
   * finish up to the grace period, hand interrupted runs back to the queue, then close every
   * connection. Bounded even when a handler ignores its signal (see BullmqWorker.close).
   */
  async stop(): Promise<void> {
    if (this.stopped) return;
    this.stopped = true;
    this.fireLoop.stop();
    await this.elector.stop();
    await this.worker?.close(this.o.shutdownGraceMs ?? 10_000);
    await this.delivery.close();
    await this.redis.quit().catch(() => {});
    await this.o.backend.close();
    this.ledgerClock?.stop();
    // An abandoned handler may still hold a pooled client (e.g. inside ctx.transaction): do not
    // wait for it; exiting the process ends its session and PostgreSQL rolls its transaction back.
    if (!(await settlesWithin(this.pool.end(), POOL_END_TIMEOUT_MS))) this.logger.warn('a PostgreSQL client is still checked out by an abandoned handler; not waiting for it');
    this.logger.info('replica stopped');
  }

  private async onLeading(lease: Lease, signal: AbortSignal): Promise<void> {
    this.logger.info({ token: lease.token.toString() }, 'elected leader');
    await this.ledger.fires.recordElection(this.leaseName, this.replicaId, lease.token, this.o.backend.kind).catch((err: Error) => {
      this.logger.warn({ err }, 'could not record the election');
    });
    void this.retention?.run(signal);
    void this.sweeper.run(signal);
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

  private forward(): void {
    const e = this.elector;
    e.on('role:changed', (role) => this.emit('role:changed', role));
    e.on('lease:acquired', (lease) => this.emit('lease:acquired', lease));
    e.on('lease:renewed', (lease, ms) => this.emit('lease:renewed', lease, ms));
    e.on('lease:lost', (lease, reason) => {
      this.logger.warn({ token: lease.token.toString(), reason }, 'leadership ended');
      this.emit('lease:lost', lease, reason);
    });
    e.on('backend:error', (err) => {
      this.logger.warn({ err: err.message }, 'lease backend error');
      this.emit('backend:error', err);
    });
    const f = this.fireLoop;
    f.on('fire:committed', (...a) => this.emit('fire:committed', ...a));
    f.on('fire:duplicate', (...a) => this.emit('fire:duplicate', ...a));
    f.on('fire:refused', (...a) => this.emit('fire:refused', ...a));
    f.on('fire:missed', (...a) => this.emit('fire:missed', ...a));
    f.on('fire:skipped', (...a) => this.emit('fire:skipped', ...a));
    f.on('enqueue:failed', (...a) => this.emit('enqueue:failed', ...a));
  }
}
