import { EventEmitter } from 'node:events';
import type { Logger } from 'pino';
import type { Clock, TimerHandle } from '../clock.js';
import { NotLeaderError, StaleTokenError } from '../errors.js';
import type { JobDefinition } from '../jobs/define-job.js';
import type { JobRegistry } from '../jobs/job-registry.js';
import type { RunDelivery } from '../jobs/run-delivery.js';
import type { Lease } from '../locks/lease.js';
import { FireQueue } from './fire-queue.js';
import type { CommittedFire, FireRequest, FireTrigger, Ledger } from './ledger.js';

/** The ledger operations the fire loop uses (a seam: unit tests pass an in-memory ledger). */
export type FireLedger = Pick<
  Ledger,
  'advanceFence' | 'commitFires' | 'markEnqueued' | 'unenqueued' | 'lastFired' | 'pausedJobs' | 'activeJobs' | 'cancelActive'
>;
import { planCatchUp, type CatchUpPlan } from './misfire.js';

/** What the fire loop needs of the elector: a narrow seam, so tests can hand it a plain object. */
export interface Leadership {
  lease(): Lease | undefined;
  stepDown(reason: string): void;
}

export interface FireLoopEvents {
  'fire:committed': [fire: CommittedFire, latenessMs: number, trigger: FireTrigger];
  /** The unique (job, scheduled_at) key refused fires: someone had already committed them. */
  'fire:duplicate': [count: number];
  /** The fence refused this leader's token: a newer leader has committed. */
  'fire:refused': [error: StaleTokenError];
  /** scheduledAt lists missed instants (bounded); count is all of them (a lower bound if huge). */
  'fire:missed': [job: string, scheduledAt: Date[], reason: string, count: number];
  'fire:skipped': [job: string, scheduledAt: Date, reason: string];
  'enqueue:failed': [error: Error];
}

export interface FireLoopOptions {
  registry: JobRegistry;
  ledger: FireLedger;
  delivery: RunDelivery;
  leadership: Leadership;
  clock: Clock;
  logger: Logger;
  replicaId: string;
  /** Fence resource for this deployment's scheduler, e.g. "scheduler/<lease name>". */
  fenceResource: string;
  /** How often the leader sweeps the outbox for committed-but-unqueued runs. Default 1 s. */
  outboxIntervalMs?: number;
}

/**
 * The leader's fire loop: one timer for all schedules, each fire committed to the ledger under the
 * leader's fencing token before it is handed to the queue.
 */
export class FireLoop extends EventEmitter<FireLoopEvents> {
  private readonly queue = new FireQueue();
  private timer: TimerHandle | undefined;
  private outboxTimer: TimerHandle | undefined;
  private running = false;
  private ticking: Promise<void> = Promise.resolve();

  constructor(private readonly o: FireLoopOptions) {
    super();
  }

  /** Begin a tenure: reconcile what was missed, then fire on schedule until `signal` aborts. */
  async lead(signal: AbortSignal): Promise<void> {
    this.running = true;
    signal.addEventListener('abort', () => this.stop(), { once: true });
    // First act of a tenure: raise the fence to our token, so a previous leader that does not yet
    // know it lost is refused from now on, not only after our first fire.
    const lease = this.o.leadership.lease();
    if (!lease) return;
    try {
      await this.o.ledger.advanceFence(this.o.fenceResource, lease.token);
    } catch (err) {
      if (!(err instanceof StaleTokenError)) throw err;
      this.emit('fire:refused', err);
      this.o.leadership.stepDown(`fence refused token ${lease.token} at election: ${err.message}`);
      return;
    }
    const now = this.o.clock.now();
    const lastFired = await this.o.ledger.lastFired();
    if (signal.aborted) return;
    const catchUp: FireRequest[] = [];
    for (const job of this.o.registry.list()) {
      const last = lastFired.get(job.name)?.getTime() ?? null;
      const plan = planCatchUp({
        schedule: job.schedule,
        policy: job.misfire,
        lastFiredMs: last,
        nowMs: now,
        catchUpWindowMs: job.catchUpWindowMs,
        misfireGraceMs: job.misfireGraceMs,
      });
      this.reportMissed(job, plan, `misfire policy "${job.misfire}" after election`);
      for (const at of plan.fire) catchUp.push({ job: job.name, scheduledAt: new Date(at), trigger: 'catchup' });
      const next = job.schedule.nextAfter(Math.max(now, last ?? now));
      if (next !== null) this.queue.push({ at: next, job: job.name, after: Math.max(now, last ?? now) });
    }
    if (catchUp.length > 0) {
      this.o.logger.info({ fires: catchUp.length }, 'catching up fires missed during the election');
      await this.commitAndEnqueue(catchUp);
    }
    if (!this.running) return;
    this.arm();
    this.scheduleOutbox();
  }

  stop(): void {
    this.running = false;
    this.timer?.cancel();
    this.outboxTimer?.cancel();
    this.timer = undefined;
    this.outboxTimer = undefined;
    this.queue.clear();
  }

  /** Fire everything due now. Called by the timer; safe to call at any time. */
  tick(): Promise<void> {
    this.ticking = this.ticking.then(() => this.fireDue()).catch((err: Error) => {
      this.o.logger.error({ err }, 'fire tick failed');
    });
    return this.ticking;
  }

  /** Fire a job now, outside its schedule (admin "trigger"). Leader only. */
  async trigger(jobName: string): Promise<CommittedFire> {
    const job = this.o.registry.require(jobName);
    if (!this.running || !this.o.leadership.lease()) throw new NotLeaderError('only the leader can trigger a job');
    const [fire] = await this.commitAndEnqueue([{ job: job.name, scheduledAt: new Date(this.o.clock.now()), trigger: 'manual' }]);
    if (!fire) throw new NotLeaderError('the fire was not committed (leadership ended or duplicate instant)');
    return fire;
  }

  private arm(): void {
    this.timer?.cancel();
    const next = this.queue.peek();
    if (!this.running || !next) return;
    this.timer = this.o.clock.setTimer(() => void this.tick(), next.at - this.o.clock.now());
  }

  private scheduleOutbox(): void {
    this.outboxTimer = this.o.clock.setTimer(async () => {
      try {
        await this.sweepOutbox();
      } catch (err) {
        this.o.logger.warn({ err }, 'outbox sweep failed');
      }
      if (this.running) this.scheduleOutbox();
    }, this.o.outboxIntervalMs ?? 1000);
  }

  /** Enqueue runs that were committed but never handed to the queue (crash between the two). */
  async sweepOutbox(): Promise<number> {
    if (!this.running || !this.o.leadership.lease()) return 0;
    const queuedJobs = this.o.registry.list().filter((j) => j.overlap === 'queue').map((j) => j.name);
    const runs = await this.o.ledger.unenqueued(500, queuedJobs);
    if (runs.length === 0) return 0;
    await this.o.delivery.enqueue(runs);
    await this.o.ledger.markEnqueued(runs.map((r) => r.runId));
    return runs.length;
  }

  private async fireDue(): Promise<void> {
    if (!this.running) return;
    const now = this.o.clock.now();
    const due = this.queue.popDue(now);
    const requests: FireRequest[] = [];
    for (const entry of due) {
      const job = this.o.registry.get(entry.job);
      if (!job) continue;
      // Late or several times due (a blocked loop, a wall clock jump): the misfire policy decides.
      const plan = planCatchUp({
        schedule: job.schedule,
        policy: job.misfire,
        lastFiredMs: entry.after,
        nowMs: now,
        catchUpWindowMs: job.catchUpWindowMs,
        misfireGraceMs: job.misfireGraceMs,
      });
      this.reportMissed(job, plan, `fired late; misfire policy "${job.misfire}"`);
      for (const at of plan.fire) requests.push({ job: job.name, scheduledAt: new Date(at), trigger: 'schedule' });
      const next = job.schedule.nextAfter(now);
      if (next !== null) this.queue.push({ at: next, job: job.name, after: now });
    }
    this.arm();
    if (requests.length > 0) await this.commitAndEnqueue(requests);
  }

  private reportMissed(job: JobDefinition, plan: CatchUpPlan, reason: string): void {
    if (plan.missedCount === 0) return;
    this.o.logger.warn(
      {
        job: job.name,
        missed: plan.missedCount,
        exact: plan.missedCountExact,
        first: plan.missed[0] === undefined ? undefined : new Date(plan.missed[0]).toISOString(),
      },
      `missed fires: ${reason}`,
    );
    this.emit('fire:missed', job.name, plan.missed.map((t) => new Date(t)), reason, plan.missedCount);
  }

  /** Apply pause and overlap policies, commit under the fence, then enqueue what was committed. */
  private async commitAndEnqueue(requests: FireRequest[]): Promise<CommittedFire[]> {
    const lease = this.o.leadership.lease();
    if (!lease) return [];
    const shaped = await this.applyPolicies(requests);
    let result;
    try {
      result = await this.o.ledger.commitFires(shaped, {
        fenceResource: this.o.fenceResource,
        token: lease.token,
        replicaId: this.o.replicaId,
        stillLeading: () => this.running && this.o.leadership.lease() !== undefined,
      });
    } catch (err) {
      if (err instanceof StaleTokenError) {
        this.o.logger.error({ token: lease.token, highest: err.highest }, 'fence refused our fires: stepping down');
        this.emit('fire:refused', err);
        this.o.leadership.stepDown(`fence refused token ${lease.token}: ${err.message}`);
        return [];
      }
      throw err;
    }
    if (result.duplicates > 0) this.emit('fire:duplicate', result.duplicates);
    const now = this.o.clock.now();
    for (const fire of result.committed) {
      if (fire.state !== 'skipped') this.emit('fire:committed', fire, now - fire.scheduledAt.getTime(), fire.trigger);
    }
    const deliver = result.committed.filter((f) => f.state === 'pending' && !f.hold);
    if (deliver.length > 0) {
      try {
        await this.o.delivery.enqueue(deliver);
        await this.o.ledger.markEnqueued(deliver.map((f) => f.runId));
      } catch (err) {
        // Committed is committed: the outbox sweep delivers these later.
        this.emit('enqueue:failed', err as Error);
        this.o.logger.warn({ err, runs: deliver.length }, 'enqueue failed; the outbox will retry');
      }
    }
    return result.committed;
  }

  private async applyPolicies(requests: FireRequest[]): Promise<FireRequest[]> {
    const paused = await this.o.ledger.pausedJobs();
    const guarded = [...new Set(requests.map((r) => r.job))].filter((name) => {
      const overlap = this.o.registry.get(name)?.overlap ?? 'allow';
      return overlap !== 'allow';
    });
    const active = await this.o.ledger.activeJobs(guarded);
    const busy = new Map<string, { active: boolean; held: boolean }>();
    for (const [job, a] of active) busy.set(job, { active: a.ids.length > 0, held: a.held > 0 });
    const out: FireRequest[] = [];
    for (const r of requests) {
      const job = this.o.registry.get(r.job);
      if (!job) continue;
      const skip = (reason: string) => {
        this.emit('fire:skipped', r.job, r.scheduledAt, reason);
        out.push({ ...r, state: 'skipped', error: reason });
      };
      if (paused.has(r.job) && r.trigger !== 'manual') {
        skip('job is paused');
        continue;
      }
      const state = busy.get(r.job) ?? { active: false, held: false };
      switch (job.overlap) {
        case 'allow':
          out.push(r);
          break;
        case 'skip':
          if (state.active) skip('overlap "skip": previous run still active');
          else out.push(r);
          busy.set(r.job, { active: true, held: false });
          break;
        case 'queue':
          if (!state.active) out.push(r);
          else if (!state.held) out.push({ ...r, hold: true });
          else skip('overlap "queue": one run already waiting');
          busy.set(r.job, { active: true, held: state.active || state.held });
          break;
        case 'replace': {
          const cancelled = await this.o.ledger.cancelActive(r.job, `replaced by the fire of ${r.scheduledAt.toISOString()}`);
          if (cancelled.length > 0) await this.o.delivery.cancel(cancelled);
          out.push(r);
          break;
        }
      }
    }
    return out;
  }
}
