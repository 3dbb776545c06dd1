import type pg from 'pg';
import { handlerOf } from '../scheduler/schedules/runtime-schedules.js';
import { classifySkip } from '../cron/occurrence-reasons.js';
import { Counter, Gauge, Histogram, Registry, collectDefaultMetrics } from 'prom-client';
import type { ReplicaView } from './replica-view.js';
import { activeRunCounts, jobHealth, workflowRunsFinishedSince } from '../ledger/admin-reads.js';
import { lastLedgerCheck } from '../ledger/ledger-check.js';
import type { Tables } from '../db/tables.js';

/** What the metrics read of a replica: its events, identity, clock offset and run-attempt counters. */
export type MetricsSource = Pick<
  ReplicaView,
  | 'on'
  | 'replicaId'
  | 'namespace'
  | 'startedAt'
  | 'logger'
  | 'role'
  | 'hostOffsetMs'
  | 'ttlMs'
  | 'clock'
  | 'jobs'
  | 'job'
  | 'attemptMetrics'
>;

/**
 * Prometheus metrics for one replica, fed by the Replica's typed events and, on the leader, reads
 * of the ledger at scrape time; the run attempts this replica executed are counted by its worker
 * as each ends (src/jobs/attempt-metrics.ts; so sums across replicas count every attempt once) and
 * asked for at each scrape.
 */
export class ReplicaMetrics {
  readonly registry = new Registry();

  constructor(
    private readonly replica: MetricsSource,
    private readonly pool: Pick<pg.Pool, 'query'>,
    /** The replica's ledger tables (its schema). */
    private readonly tables: Tables,
  ) {
    // No prefix: stock Node.js dashboards expect process_cpu_seconds_total, nodejs_heap_size_used_bytes, …
    collectDefaultMetrics({ register: this.registry });
    this.registry.setDefaultLabels({ replica: replica.replicaId, namespace: replica.namespace });

    // Registered in this order so the exposition lists the families as it always has; the run
    // attempts' four families follow them (exposition()).
    const lease = this.leaseMetrics();
    const fires = this.fireMetrics();
    const backendErrors = this.processMetrics();
    this.runMetrics();
    this.workflowMetrics();
    this.jobMetrics();
    this.ledgerCheckMetrics();
    this.wireEvents(lease, fires, backendErrors);
  }

  /** Leadership: whether this replica leads, its token, renewal latency, tenures won and lost. */
  private leaseMetrics() {
    const registers = [this.registry];
    const isLeader = new Gauge({
      name: 'cronwarden_is_leader',
      help: '1 while this replica holds the scheduler lease',
      registers,
    });
    const token = new Gauge({
      name: 'cronwarden_lease_token',
      help: 'Fencing token of the current (or last) tenure of this replica',
      registers,
    });
    const renew = new Histogram({
      name: 'cronwarden_lease_renew_latency_seconds',
      help: 'Round trip of successful lease renewals',
      buckets: [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5],
      registers,
    });
    const acquired = new Counter({
      name: 'cronwarden_leader_elections_total',
      help: 'Tenures won by this replica',
      registers,
    });
    const lost = new Counter({
      name: 'cronwarden_leader_losses_total',
      help: 'Tenures ended, by reason class',
      labelNames: ['reason'],
      registers,
    });
    new Gauge({
      name: 'cronwarden_lease_ttl_seconds',
      help: 'The leader lease TTL this replica uses (the no-leader alert waits two of them)',
      registers,
    }).set(this.replica.ttlMs / 1000);
    const renewedAt = new Gauge({
      name: 'cronwarden_lease_renewed_timestamp_seconds',
      help: 'When this replica last acquired or renewed the lease (0: never); kept after it stops leading',
      registers,
    });
    renewedAt.set(0);
    return { isLeader, token, renew, acquired, lost, renewedAt };
  }

  /** Fires: committed, duplicate, refused by the fence, missed, skipped, their lateness, and failed enqueues. */
  private fireMetrics() {
    const registers = [this.registry];
    const fires = new Counter({
      name: 'cronwarden_fires_total',
      help: 'Fires committed to the ledger by this replica',
      labelNames: ['job', 'trigger'],
      registers,
    });
    const duplicates = new Counter({
      name: 'cronwarden_fires_duplicate_total',
      help: 'Fires refused by the unique (job, scheduled_at) key: already committed',
      registers,
    });
    const refused = new Counter({
      name: 'cronwarden_fires_refused_total',
      help: 'Fire batches refused by the fence: this replica led with a stale token',
      registers,
    });
    const missed = new Counter({
      name: 'cronwarden_fires_missed_total',
      help: 'Scheduled times not fired (misfire policy)',
      labelNames: ['job'],
      registers,
    });
    const skipped = new Counter({
      name: 'cronwarden_fires_skipped_total',
      help: 'Fires skipped by the pause or overlap policy',
      labelNames: ['job'],
      registers,
    });
    const lateness = new Histogram({
      name: 'cronwarden_fire_lateness_seconds',
      help: 'Commit time minus scheduled time of each fire',
      labelNames: ['trigger'],
      buckets: [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300],
      registers,
    });
    const enqueueFailed = new Counter({
      name: 'cronwarden_enqueue_failures_total',
      help: 'Committed fires whose BullMQ enqueue failed (retried by the outbox)',
      registers,
    });
    const late = new Counter({
      name: 'cronwarden_fires_late_total',
      help: "Scheduled fires committed later than the job's misfire grace after their scheduled time",
      labelNames: ['job'],
      registers,
    });
    const occurrences = new Counter({
      name: 'cronwarden_occurrences_total',
      help:
        'Due instants this replica accounted for when it committed them: outcome fired (reason: the trigger), skipped ' +
        '(paused, overlap-skip, queue-full, coalesced, other) or missed (catch-up-window, misfire-policy, max-catch-up, ' +
        'max-fires); a runtime schedule is labelled with its handler',
      labelNames: ['job', 'outcome', 'reason'],
      registers,
    });
    return { fires, duplicates, refused, missed, skipped, lateness, enqueueFailed, late, occurrences };
  }

  /** The replica's surroundings: its host clock against the ledger's, and lease backend errors. Returns the latter's counter. */
  private processMetrics(): Counter {
    const registers = [this.registry];
    const replica = this.replica;
    new Gauge({
      name: 'cronwarden_host_clock_offset_seconds',
      help: "This host's wall clock minus the ledger's clock (the scheduler keeps the ledger's time)",
      registers,
      collect() {
        const offset = replica.hostOffsetMs();
        if (offset !== undefined) this.set(offset / 1000);
      },
    });
    return new Counter({
      name: 'cronwarden_backend_errors_total',
      help: 'Lease backend errors seen by the elector',
      registers,
    });
  }

  /** Runs, on the leader: those active in the ledger (attempts: src/jobs/attempt-metrics.ts). */
  private runMetrics() {
    const registers = [this.registry];
    const { replica, pool, tables } = this;
    new Gauge({
      name: 'cronwarden_runs_active',
      help: 'Runs pending, running or retrying in the ledger (cluster-wide, so only the leader exports it: a sum over replicas stays right)',
      labelNames: ['state'],
      registers,
      collect: async function (this: Gauge<'state'>) {
        this.reset();
        if (replica.role !== 'leader') return;
        for (const [state, n] of await activeRunCounts(pool, tables)) this.set({ state }, n);
      },
    });
  }

  /**
   * Workflows, on the leader: workflow runs that ended, by outcome, with their duration from fire
   * to end (step attempts and hand-offs: src/jobs/attempt-metrics.ts).
   */
  private workflowMetrics() {
    const registers = [this.registry];
    const { replica, pool, tables } = this;
    const runs = new Counter({
      name: 'cronwarden_workflow_runs_finished_total',
      help: 'Workflow runs that ended, by workflow and outcome (leader only: each counted once)',
      labelNames: ['workflow', 'outcome'],
      registers,
    });
    const durations = new Histogram({
      name: 'cronwarden_workflow_run_duration_seconds',
      help: 'Workflow runs from fire to end, by workflow and outcome (leader only)',
      labelNames: ['workflow', 'outcome'],
      buckets: [0.1, 0.5, 1, 5, 10, 30, 60, 300, 900, 3600, 4 * 3600, 24 * 3600],
      registers,
    });
    let since = new Date(replica.startedAt);
    const seen = new Map<string, number>();
    // Read at scrape time: runs that ended since the last scrape (5 s overlap).
    new Gauge({
      name: 'cronwarden_workflow_runs_read_timestamp_seconds',
      help: 'When the leader last read the workflow runs that ended (leader only)',
      registers,
      collect: async function (this: Gauge) {
        if (replica.role !== 'leader') return;
        for (const run of await workflowRunsFinishedSince(pool, tables, new Date(since.getTime() - 5000))) {
          if (seen.has(run.id)) continue;
          seen.set(run.id, run.finishedAt.getTime());
          runs.inc({ workflow: run.workflow, outcome: run.state });
          durations.observe({ workflow: run.workflow, outcome: run.state }, Math.max(0, run.seconds));
          if (run.finishedAt > since) since = run.finishedAt;
        }
        for (const [id, at] of seen) if (at <= since.getTime() - 5000) seen.delete(id);
        this.set(Date.now() / 1000);
      },
    });
  }

  /**
   * Per job, what a cron operator alerts on: last fire, next fire due, last success, failure
   * streak. Cluster-wide figures read from the ledger in one bounded query (jobHealth), so only
   * the leader exports them: one series per job, and a follower's scrape costs no query.
   */
  private jobMetrics(): void {
    const { replica, pool, tables } = this;
    // The registry collects its metrics side by side: the four gauges share one load (one query).
    let loading: Promise<void> | undefined;
    const collect = () =>
      (loading ??= load()
        .catch((err: Error) => replica.logger.warn({ err: err.message }, 'metrics: could not read job health'))
        .finally(() => (loading = undefined)));
    const gauge = (name: string, help: string) =>
      new Gauge({ name, help, labelNames: ['job'], registers: [this.registry], collect });
    const lastFire = gauge(
      'cronwarden_job_last_fire_timestamp_seconds',
      "Scheduled time of the job's newest committed fire (leader only)",
    );
    const nextFire = gauge(
      'cronwarden_job_next_fire_timestamp_seconds',
      'When the job is due next after its newest committed fire; in the past means overdue (leader only)',
    );
    const lastSuccess = gauge(
      'cronwarden_job_last_success_timestamp_seconds',
      "When the job's newest completed run finished (leader only; scheduled runs)",
    );
    const failures = gauge(
      'cronwarden_job_consecutive_failures',
      'Failed runs of the job since its newest completed one (leader only; scheduled runs)',
    );
    const load = async () => {
      for (const g of [lastFire, nextFire, lastSuccess, failures]) g.reset();
      if (replica.role !== 'leader') return;
      const jobs = replica.jobs();
      const health = await jobHealth(
        pool,
        tables,
        jobs.map((j) => j.name),
      );
      for (const job of jobs) {
        const h = health.get(job.name);
        if (!h) continue;
        const labels = { job: job.name };
        failures.set(labels, h.consecutiveFailures);
        if (h.lastSuccess) lastSuccess.set(labels, h.lastSuccess.getTime() / 1000);
        if (!h.lastFire) continue;
        lastFire.set(labels, h.lastFire.getTime() / 1000);
        const next = job.schedule.nextAfter(h.lastFire.getTime());
        if (next !== null) nextFire.set(labels, next / 1000);
      }
    };
  }

  /**
   * The live ledger check's last report (scheduler/chores/ledger-check.ts), read from the ledger at
   * scrape time: the violations each check found and when the check last completed. Cluster-wide,
   * so only a leader exports them (alert on the max over replicas).
   */
  private ledgerCheckMetrics(): void {
    const { replica, pool, tables } = this;
    let loading: Promise<void> | undefined;
    const collect = () =>
      (loading ??= load()
        .catch((err: Error) => replica.logger.warn({ err: err.message }, 'metrics: could not read the ledger check'))
        .finally(() => (loading = undefined)));
    const violations = new Gauge({
      name: 'cronwarden_ledger_check_violations',
      help: "What the live ledger check's last round found, per check: duplicate-slots (I1), token-order (I3), unsettled (I6), workflow-order (I7), lost-writes (leader only)",
      labelNames: ['check'],
      registers: [this.registry],
      collect,
    });
    const lastRun = new Gauge({
      name: 'cronwarden_ledger_check_last_run_timestamp_seconds',
      help: 'When the live ledger check last completed a round (leader only)',
      registers: [this.registry],
      collect,
    });
    const load = async () => {
      violations.reset();
      lastRun.reset();
      if (replica.role !== 'leader') return;
      const last = await lastLedgerCheck(pool, tables);
      if (!last) return;
      const report = last.report as { counts?: Record<string, number> };
      for (const [check, n] of Object.entries(report.counts ?? {})) violations.set({ check }, n);
      lastRun.set(last.checkedAt.getTime() / 1000);
    };
  }

  /** Feeds the lease and fire metrics from the replica's typed events. */
  private wireEvents(lease: LeaseMetrics, fires: FireMetrics, backendErrors: Counter): void {
    const replica = this.replica;
    lease.isLeader.set(0);
    replica.on('role:changed', (role) => lease.isLeader.set(role === 'leader' ? 1 : 0));
    const renewed = () => lease.renewedAt.set(replica.clock.now() / 1000);
    replica.on('lease:acquired', (acquired) => {
      lease.token.set(Number(acquired.token));
      lease.acquired.inc();
      renewed();
    });
    replica.on('lease:renewed', (_lease, ms) => {
      lease.renew.observe(ms / 1000);
      renewed();
    });
    replica.on('lease:lost', (_lease, reason) => lease.lost.inc({ reason: reasonClass(reason) }));
    replica.on('fire:committed', (fire, latenessMs, trigger) => {
      if (fire.state === 'skipped') return; // counted by fire:skipped
      fires.fires.inc({ job: handlerOf(fire.job), trigger });
      if (trigger !== 'manual' && trigger !== 'once' && trigger !== 'step')
        fires.occurrences.inc({ job: handlerOf(fire.job), outcome: 'fired', reason: trigger });
      fires.lateness.observe({ trigger }, Math.max(0, latenessMs) / 1000);
      const grace = replica.job(fire.job)?.misfireGraceMs;
      if (trigger !== 'manual' && grace !== undefined && latenessMs > grace) fires.late.inc({ job: fire.job });
    });
    replica.on('fire:duplicate', (count) => fires.duplicates.inc(count));
    replica.on('fire:refused', () => fires.refused.inc());
    replica.on('fire:missed', (job, _dates, _reason, count) => fires.missed.inc({ job: handlerOf(job) }, count));
    replica.on('fire:skipped', (job, _at, reason) => {
      fires.skipped.inc({ job: handlerOf(job) });
      fires.occurrences.inc({ job: handlerOf(job), outcome: 'skipped', reason: classifySkip(reason) });
    });
    replica.on('occurrences:missed', (job, reason, count) =>
      fires.occurrences.inc({ job: handlerOf(job), outcome: 'missed', reason }, count),
    );
    replica.on('enqueue:failed', () => fires.enqueueFailed.inc());
    replica.on('backend:error', () => backendErrors.inc());
  }

  /** Prometheus text exposition: this registry's, then the run attempts the replica's worker counted. */
  async exposition(): Promise<string> {
    const [own, attempts] = await Promise.all([
      this.registry.metrics(),
      this.replica.attemptMetrics().catch((err: Error) => {
        this.replica.logger.warn({ err: err.message }, 'metrics: could not read the run attempts');
        return '';
      }),
    ]);
    return own.endsWith('\n') || attempts === '' ? own + attempts : `${own}\n${attempts}`;
  }

  get contentType(): string {
    return this.registry.contentType;
  }
}

type LeaseMetrics = ReturnType<ReplicaMetrics['leaseMetrics']>;
type FireMetrics = ReturnType<ReplicaMetrics['fireMetrics']>;

function reasonClass(reason: string): string {
  if (reason === 'resigned' || reason === 'stopped') return reason;
  if (reason.startsWith('local deadline')) return 'deadline';
  if (reason.startsWith('fence')) return 'fence';
  return 'lost';
}
