import { EventEmitter } from 'node:events';
import type { Redis } from 'ioredis';
import type { Logger } from 'pino';
import type { AdminServer } from '../admin/server.js';
import type { AdminThread } from '../admin/admin-thread.js';
import type { ReplicaEvents, ReplicaView, RuntimeAdmin } from '../admin/replica-view.js';
import { systemClock, type Clock } from '../clock.js';
import type { JobDefinition } from '../jobs/define-job.js';
import { JobRegistry } from '../jobs/job-registry.js';
import { BullmqDelivery } from '../jobs/bullmq-delivery.js';
import type { CommittedFire } from '../ledger/fire-ledger.js';
import { Ledger } from '../ledger/ledger.js';
import type { JobPause, PauseRequest } from '../ledger/pauses.js';
import type { RetriedRun } from '../ledger/run-retry.js';
import { runDetail } from '../ledger/run-reads.js';
import type { Lease } from '../locks/lease.js';
import { limitedWarn } from '../once-per-kind.js';
import { settlesWithin } from '../settles-within.js';
import type { ElectorRole } from '../scheduler/election/elector.js';
import type { LedgerClock } from '../scheduler/election/ledger-clock.js';
import { advertisedUrl, createAdmin, listenFailure } from './admin-factory.js';
import { checkLeaseBackend } from './lease-backend-check.js';
import { deliveryRedis, endPool, ledgerPool, schedulerPool, warnLostClients, watchConnections } from './connections.js';
import { MemberHeartbeat, shardedBeatMs } from './member-heartbeat.js';
import { resolveReplicaOptions, type ResolvedReplicaOptions } from './replica-defaults.js';
import type { ReplicaOptions } from './replica-options.js';
import { schedulerClock } from './scheduler-clock.js';
import { ReplicaScheduler } from './replica-scheduler.js';
import { RunWorker } from './run-worker.js';
import { WorkflowOps } from './workflow-ops.js';
import type { SentSignal } from '../ledger/workflow-ledger.js';
import type { Shards } from './shards.js';

export type { ReplicaAdminOptions, ReplicaOptions } from './replica-options.js';
export type { ReplicaEvents } from '../admin/replica-view.js';

/** Sharded: how long stop() waits for its member row to go before it releases its shards. */
const MEMBER_DELETE_WAIT_MS = 250;

/**
 * One cronwarden replica, the composition root: it wires the parts, and starts and stops them in
 * order; the parts decide. Each shard's leadership (ShardLeadership) campaigns, fires while leading
 * and stands in while following; the worker executes runs always; the admin HTTP and the member
 * row say who it is. `cronwarden start` is this class plus configuration and signal handling.
 */
export class Replica extends EventEmitter<ReplicaEvents> implements ReplicaView {
  readonly replicaId: string;
  readonly namespace: string;
  /** The PostgreSQL schema of this deployment's ledger. */
  readonly schema: string;
  readonly registry: JobRegistry;
  /** The ledger on the replica's pool: its worker's runs, workflows, the admin's writes. */
  readonly ledger: Ledger;
  /** The same ledger on the scheduler's own connections, which runs waiting on locks cannot take (connections.ts). */
  private readonly schedulerLedger: Ledger;
  readonly logger: Logger;
  readonly startedAt: number;
  /** Set when the scheduler keeps time by the ledger's clock (the default). */
  readonly ledgerClock: LedgerClock | undefined;
  /** The scheduler's clock: the ledger's, unless one was given. */
  readonly clock: Clock;
  /** Each shard's leadership, the leader's chores, the runtime schedules kept current. */
  readonly scheduler: ReplicaScheduler;
  /** This replica's leadership of each shard (one shard: the scheduler's). */
  readonly shards: Shards;
  /** Runtime schedules, one-off runs and backfills for the admin API (routed by the job's shard). */
  readonly runtime: RuntimeAdmin;
  /** Retry, cancel and signal workflow runs. */
  readonly workflows: WorkflowOps;
  /** Where this replica's admin HTTP answers, once started (undefined without one). */
  adminUrl: string | undefined;
  private readonly o: ResolvedReplicaOptions;
  private readonly redis: Redis;
  private readonly delivery: BullmqDelivery;
  private readonly worker: RunWorker;
  private admin: AdminServer | AdminThread | undefined;
  private heartbeat: MemberHeartbeat | undefined;
  private stopped = false;

  constructor(options: ReplicaOptions) {
    super();
    const o = (this.o = resolveReplicaOptions(options));
    ({ replicaId: this.replicaId, namespace: this.namespace, schema: this.schema } = o);
    this.registry = o.jobs instanceof JobRegistry ? o.jobs : new JobRegistry(o.jobs);
    const logger = (this.logger = o.logger.child({ replica: this.replicaId }));
    this.startedAt = (o.clock ?? systemClock).now();
    // Warnings that could repeat many times a second (reconnects, a flapping backend), rate-limited.
    const warn = limitedWarn(logger, () => (o.clock ?? systemClock).monotonic());
    const pool = o.pool ?? ledgerPool(o.databaseUrl!, o.replicaId);
    this.redis = o.redis ?? deliveryRedis(o.redisUrl!);
    warnLostClients(pool, warn);
    // Connection errors of the clients made here are ours to log; the caller's clients are theirs.
    watchConnections({ pool: o.pool ? undefined : pool, redis: o.redis ? undefined : this.redis }, warn);
    const ledger = (this.ledger = new Ledger(pool, this.schema));
    const schedulerLedger = (this.schedulerLedger = new Ledger(
      schedulerPool(o.databaseUrl ?? pool, o.replicaId, warn),
      this.schema,
    ));
    this.ledgerClock = o.clock ? undefined : schedulerClock(schedulerLedger, logger);
    const clock = (this.clock = o.clock ?? this.ledgerClock!);
    const registry = this.registry;
    this.delivery = new BullmqDelivery({ connection: this.redis, namespace: this.namespace, registry, ledger });
    this.workflows = new WorkflowOps({ ledger, registry, delivery: this.delivery, logger });
    this.scheduler = new ReplicaScheduler({
      options: o,
      registry,
      ledger: schedulerLedger,
      delivery: this.delivery,
      clock,
      logger,
      warn,
      events: this,
      followers: () => this.heartbeat?.followers,
      beatMs: () => this.heartbeat?.intervalMs,
      timeOutWaits: () => this.workflows.timeOutWaits(),
    });
    ({ shards: this.shards, runtime: this.runtime } = this.scheduler);
    ledger.useLeaseTtl(this.ttlMs);
    schedulerLedger.useLeaseTtl(this.ttlMs);
    const countAttempts = o.admin !== undefined;
    this.worker = new RunWorker({ ...o, ledger, registry, delivery: this.delivery, logger, countAttempts });
  }

  async start(): Promise<void> {
    // An admin thread loads its modules while the rest starts; it is closed if start-up fails.
    const a = this.o.admin;
    this.admin = a && createAdmin({ ...this.o, admin: a, replica: this, pool: this.ledger.pool });
    try {
      await this.startParts();
    } catch (err) {
      // A campaign already begun (or a lease already won) is given up before the error goes out.
      this.scheduler.windDown();
      await this.shards.stop();
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
    // Before anything runs: a schema that holds another deployment's ledger is refused here, and
    // so is a lease backend that cannot find its table.
    await this.ledger.bindNamespace(this.namespace);
    await checkLeaseBackend(this.o.backend, {
      leaseName: this.leaseName,
      schema: this.schema,
      timeoutMs: this.o.election.ttlMs,
      logger: this.logger,
    });
    await this.ledgerClock?.start();
    // Campaign before the worker and the admin HTTP start: leading needs neither, and on a starved
    // host every second of start-up before the campaign is a second a crashed leader goes unreplaced.
    this.scheduler.start();
    this.logger.info({ sinceProcessStartMs: Math.round(process.uptime() * 1000) }, 'campaigning for leadership');
    await this.worker.start();
    if (this.admin) {
      const bound = await this.admin.listen().catch((err: unknown) => {
        throw listenFailure(err, this.o.admin!);
      });
      this.adminUrl = advertisedUrl(this.o.admin!, bound);
    }
    await this.startHeartbeat();
  }

  /** This replica's member row, with the URL it advertises; sharded, each beat balances the shards. */
  private async startHeartbeat(): Promise<void> {
    const sharded = this.o.shards > 1;
    this.heartbeat = new MemberHeartbeat({
      ...this.o,
      pool: this.schedulerLedger.pool,
      tables: this.ledger.tables,
      role: () => this.role,
      // Workflows also as "<workflow>@<fingerprint>": their step runs' jobs, defined while a member has it.
      jobs: () => [...this.registry.list(), ...this.registry.workflowVersions().map((name) => ({ name }))],
      adminUrl: this.adminUrl,
      witness: this.ledger.runs.witness,
      logger: this.logger,
      intervalMs: sharded ? shardedBeatMs(this.ttlMs) : undefined,
      everyoneStandsIn: sharded,
      onBeat: sharded ? (members) => this.scheduler.balance(members) : undefined,
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
    this.scheduler.windDown();
    // Sharded: the member row goes first, so the others' balancers stop counting this replica as
    // one with room before its shards come free (else they hand shards "to" it). Bounded: a ledger
    // that does not answer must not hold up the hand-over.
    const memberGone = this.o.shards > 1 ? this.heartbeat?.stop() : undefined;
    if (memberGone) await settlesWithin(memberGone, MEMBER_DELETE_WAIT_MS);
    await this.shards.stop();
    await (memberGone ?? this.heartbeat?.stop());
    await this.admin?.close();
    await this.worker.close(this.o.shutdownGraceMs);
    await this.delivery.close();
    // Clients the caller gave us stay open; ours are closed.
    if (!this.o.redis) await this.redis.quit().catch(() => {});
    await this.o.backend.close();
    await this.shards.flush();
    this.ledgerClock?.stop();
    if (!this.o.pool) await endPool(this.ledger.pool, this.logger);
    await endPool(this.schedulerLedger.pool, this.logger);
    this.logger.info('replica stopped');
  }

  /** The scheduler's lease (shard 0's, when leadership is sharded). */
  get leaseName(): string {
    return this.shards.first.leaseName;
  }
  /** The shards' lease names when leadership is sharded (more than one); undefined otherwise. */
  get shardLeases(): readonly string[] | undefined {
    return this.shards.leaseNames;
  }
  /** Where its probe listener answers /healthz and /readyz, once started (undefined without one). */
  get probeUrl(): string | undefined {
    return this.admin?.probeUrl;
  }

  // The admin view (ReplicaView): what the admin server and the metrics may see and do.
  /** Unsharded: the elector's role. Sharded: 'leader' while leading any shard, else shard 0's role. */
  get role(): ElectorRole {
    return this.shards.role;
  }
  get backendKind(): string {
    return this.o.backend.kind;
  }
  get ttlMs(): number {
    return this.o.election.ttlMs;
  }
  get retentionMs(): number {
    return this.o.retentionMs;
  }
  get leadingSince(): number | undefined {
    return this.shards.leadingSince;
  }
  /** The lease while leading (sharded: of the lowest shard this replica leads). */
  lease(): Lease | undefined {
    return this.shards.lease();
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
  attemptMetrics(): Promise<string> {
    return this.worker.metrics?.text() ?? Promise.resolve('');
  }
  trigger(job: string): Promise<CommittedFire> {
    return this.shards.forJob(job).trigger(job);
  }
  setPaused(job: string, paused: boolean): Promise<void> {
    return this.ledger.fires.setPaused(job, paused);
  }
  pause(job: string, request: PauseRequest): Promise<JobPause> {
    return this.ledger.fires.pause(job, request);
  }
  /** Give up every shard this replica leads; false when it leads none. */
  resign(): Promise<boolean> {
    return this.shards.resign();
  }
  cancel(runId: bigint, reason: string): Promise<boolean> {
    return this.workflows.cancel(runId, reason);
  }
  signal(runId: bigint, name: string, data: unknown, by: string): Promise<SentSignal> {
    return this.workflows.signal(runId, name, data, by);
  }
  async retry(runId: bigint): Promise<RetriedRun> {
    // A workflow run (or a step of one) resumes from its failed steps, on any replica.
    const workflowRun = await this.workflows.workflowRunOf(runId);
    if (workflowRun !== undefined) return this.workflows.retry(workflowRun);
    // Sharded: the run's job says whose fence the retry goes under (an unknown run: shard 0 says so).
    const run = this.o.shards > 1 ? await runDetail(this.ledger.pool, this.ledger.tables, runId) : null;
    return (run ? this.shards.forJob(run.job) : this.shards.first).retry(runId);
  }
}
