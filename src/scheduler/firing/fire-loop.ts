import { EventEmitter } from 'node:events';
import type { Logger } from 'pino';
import type { Clock, TimerHandle } from '../../clock.js';
import { NotLeaderError, StaleTokenError } from '../../errors.js';
import type { Lease } from '../../locks/lease.js';
import { FireQueue, type FireEntry } from './fire-queue.js';
import type {
  CommittedFire,
  FireBatchResult,
  FireLedger,
  FireRequest,
  FireTrigger,
  MissedRangeRecord,
  OpenEra,
} from '../../ledger/fire-ledger.js';
import type { RunDelivery } from './run-delivery.js';
import type { ScheduledJob, ScheduledJobs } from '../../cron/scheduled-job.js';
import type { CatchUpPlan } from '../../cron/misfire.js';
import { tracedFireCommit } from './fire-tracing.js';
import { COALESCED, fireTrigger, pauseReason, planJobCatchUp, queueFullReason } from '../../cron/job-policies.js';
import { pauseHolds } from '../../ledger/pauses.js';
import { HandOverGuard } from './hand-over-guard.js';
import { forEachSliced } from './yielding.js';
import type { MissedReason } from '../../cron/occurrence-reasons.js';
import { slotOwner } from '../../cron/job-names.js';
import { changedAtOf, changedEra, eraAtTenureStart, missedRecords } from './occurrence-accounting.js';

/** The ledger operations the fire loop uses (a seam: unit tests pass an in-memory ledger). */
export type FireLoopLedger = Pick<
  FireLedger,
  | 'advanceFence'
  | 'commitFires'
  | 'markEnqueued'
  | 'unenqueued'
  | 'lastFired'
  | 'pauses'
  | 'activeJobs'
  | 'openEras'
  | 'openNewEras'
>;

/**
 * After a failed commit (a database blip, a failover), the batch's jobs are retried this soon at
 * the latest. Short: a promoted standby is found by the first retry after it, and a retry against
 * a ledger still down costs one refused connection.
 */
export const COMMIT_RETRY_MS = 250;
/**
 * Fires per commit transaction in a large tick; BullMQ takes each chunk while the next ones commit.
 * 500 and two at once: in turn with raw `addBulk` (bench/scheduler.ts, six rounds each, load 2.0)
 * 500 × 2 gave 0.80 of its rate, 334 × 3 0.78, 250 × 4 0.75, 250 × 2 0.69, and 250 one at a time 0.60.
 */
export const COMMIT_CHUNK = 500;
/**
 * Chunks of a tick committing at once: the leader holds its fence row FOR SHARE while its token is
 * the fence's (fire-commit.ts), so they do not wait for each other, and their COMMITs' flushes overlap.
 */
const COMMITS_IN_FLIGHT = 2;
/** Chunks being handed to the queue at once; the next commit waits for the oldest (bounded memory). */
const HAND_OVERS_IN_FLIGHT = 4;
/**
 * Due entries a tick plans at a time: its memory is a few chunks' plans and fires, whatever is due.
 * Four commit chunks, so the chunk boundary (new policy reads) is rare next to the commits.
 */
export const PLAN_CHUNK = 4 * COMMIT_CHUNK;

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
  /** A missed range was committed: `count` instants of `job` missed for `reason` (one of missedReasons). */
  'occurrences:missed': [job: string, reason: MissedReason, count: number];
  'enqueue:failed': [error: Error];
  /** A tenure's reconciliation is done and the timer armed; `schedules` entries wait in the queue. */
  'loop:armed': [schedules: number];
}

export interface FireLoopOptions {
  registry: ScheduledJobs;
  ledger: FireLoopLedger;
  delivery: Pick<RunDelivery, 'enqueue' | 'cancel'>;
  leadership: Leadership;
  clock: Clock;
  logger: Logger;
  replicaId: string;
  /** Fence resource for this deployment's scheduler, e.g. "scheduler/<lease name>". */
  fenceResource: string;
  /** How often the leader sweeps the outbox for committed-but-unqueued runs. Default 1 s. */
  outboxIntervalMs?: number;
  /**
   * Sharded leadership: the jobs whose runs this loop's outbox hands over (its shard's). Another
   * shard's runs are its own leader's to hand over, so the outbox never races that fire path.
   * Default: every job.
   */
  owns?: (job: string) => boolean;
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
  /** Counts tenures, so a commit that outlives its tenure does not touch the next one's queue. */
  private tenure = 0;
  private ticking: Promise<void> = Promise.resolve();
  /** Runs the fire path is handing to the queue: the outbox leaves them alone. */
  private readonly handingOver = new HandOverGuard();
  private queued: { from: readonly ScheduledJob[]; names: string[] } | undefined;

  constructor(private readonly o: FireLoopOptions) {
    super();
  }

  /** Begin a tenure: reconcile what was missed, then fire on schedule until `signal` aborts. */
  async lead(signal: AbortSignal): Promise<void> {
    this.running = true;
    this.tenure++;
    this.stopOn(signal);
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
    const tenure = this.tenure;
    const start = await this.planTenure(now, () => this.running && this.tenure === tenure && !signal.aborted);
    if (!start) return;
    // The eras first: a catch-up's runs and missed ranges are read against the schedule they were
    // planned by. Spliced out, so they are not held while the catch-up commits.
    if (!(await this.openEras(start.newEras.splice(0), lease))) return;
    // A failure here ends the tenure (the elector steps down): the chunks committed before it are
    // the new last fires, so the next leader catches up from where this one stopped.
    if (start.behind.length > 0) await this.catchUp(start.behind, now);
    if (!this.running) return;
    this.arm();
    this.scheduleOutbox();
    this.emit('loop:armed', this.queue.size);
  }

  /**
   * A tenure's start, read from the ledger: the schedule eras to open, each job's next entry in the
   * queue, and the jobs with slots due since their last fire (to catch up or account for). In a
   * method of its own so that what it reads (a last fire and an era per schedule) is let go once
   * planned, not held while the catch-up commits. In slices: with a million schedules this loop
   * takes seconds, and the lease must keep renewing.
   */
  private async planTenure(
    now: number,
    current: () => boolean,
  ): Promise<{ newEras: OpenEra[]; behind: { job: ScheduledJob; after: number }[] } | undefined> {
    const [lastFired, eras] = await Promise.all([this.o.ledger.lastFired(), this.o.ledger.openEras()]);
    if (!current()) return undefined;
    const newEras: OpenEra[] = [];
    const behind: { job: ScheduledJob; after: number }[] = [];
    const planned = await forEachSliced(
      this.o.registry.list(),
      (job) => {
        // By slot owner: a runtime schedule whose handler changed goes on from its own last slot.
        const lastFire = lastFired.get(slotOwner(job.name))?.getTime() ?? null;
        const era = eraAtTenureStart(job, eras.get(slotOwner(job.name)), lastFire, now);
        if (era.open) newEras.push(era.open);
        const last = era.planFrom;
        // Behind: some instant fell due in (last, now]; planJobCatchUp decides what it becomes.
        const due = last === null || last >= now ? null : job.schedule.nextAfter(last);
        if (last !== null && due !== null && due <= now) behind.push({ job, after: last });
        const next = job.schedule.nextAfter(Math.max(now, last ?? now));
        if (next !== null) this.queue.push({ at: next, job: job.name, after: Math.max(now, last ?? now) });
      },
      current,
    );
    return planned ? { newEras, behind } : undefined;
  }

  /**
   * Catch up the jobs that fell behind while no one led, PLAN_CHUNK jobs a commit plan (as a tick
   * does), each slot under its misfire policy; the missed ones are reported once their chunk
   * committed. Throws when a commit fails.
   */
  private async catchUp(behind: readonly { job: ScheduledJob; after: number }[], now: number): Promise<void> {
    this.o.logger.info({ jobs: behind.length }, 'catching up fires missed during the election');
    const handOvers: Promise<void>[] = [];
    try {
      for (let i = 0; i < behind.length && this.running; i += PLAN_CHUNK) {
        const { plans, requests, missed } = planFires(behind.slice(i, i + PLAN_CHUNK), now, () => 'catchup');
        if (requests.length > 0 || missed.length > 0) await this.commitAndEnqueue(requests, missed, { handOvers });
        for (const { job, plan } of plans)
          this.reportMissed(job, plan, `misfire policy "${job.misfire}" after election`);
      }
    } finally {
      await Promise.all(handOvers); // never rejects
    }
  }

  /**
   * Stop when the tenure's signal aborts. A method of its own so that the listener, which lives as
   * long as the tenure, closes over nothing of lead(): a closure there would share lead()'s context
   * and keep its election-time arrays (one era and catch-up plan per schedule) for the whole tenure.
   */
  private stopOn(signal: AbortSignal): void {
    signal.addEventListener('abort', () => this.stop(), { once: true });
  }

  /**
   * Runtime schedules changed mid-tenure: open an era for each whose schedule is new or differs
   * from its open era, from when its current version took effect. Fails quietly (logged): the next
   * tenure opens what this one could not.
   */
  private async openChangedEras(names: readonly string[], sinceMs: (job: string) => number): Promise<void> {
    const lease = this.o.leadership.lease();
    const jobs = [...new Set(names)].map((n) => this.o.registry.get(n)).filter((j) => j !== undefined);
    if (!lease || jobs.length === 0) return;
    try {
      const current = await this.o.ledger.openEras(jobs.map((j) => slotOwner(j.name)));
      const open = jobs
        .map((j) => changedEra(j, current.get(slotOwner(j.name)), changedAtOf(j) ?? sinceMs(j.name)))
        .filter((e) => e !== undefined);
      await this.openEras(open, lease);
    } catch (err) {
      this.o.logger.warn({ err, jobs: jobs.length }, 'could not open schedule eras for changed schedules');
    }
  }

  /** Record the tenure's new schedule eras; false (and step down) when the fence refused the token. */
  private async openEras(eras: OpenEra[], lease: Lease): Promise<boolean> {
    if (eras.length === 0) return true;
    try {
      await this.o.ledger.openNewEras(eras, {
        fenceResource: this.o.fenceResource,
        token: lease.token,
        replicaId: this.o.replicaId,
      });
      this.o.logger.info({ jobs: eras.length }, 'schedule eras opened (new or changed schedules)');
      return true;
    } catch (err) {
      if (!(err instanceof StaleTokenError)) throw err;
      this.emit('fire:refused', err);
      this.o.leadership.stepDown(`fence refused token ${lease.token} opening schedule eras: ${err.message}`);
      return false;
    }
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
    this.ticking = this.ticking
      .then(() => this.fireDue())
      .catch((err: Error) => {
        this.o.logger.error({ err }, 'fire tick failed');
      });
    return this.ticking;
  }

  /**
   * Some jobs' schedules changed (runtime schedules: created, updated, paused, deleted): move their
   * timer entries to the new schedule, keeping what was already handled. A job seen for the first
   * time starts after `sinceMs`. Runs between ticks, so no batch of these jobs is mid-commit.
   */
  reschedule(jobs: readonly string[], sinceMs: (job: string) => number): Promise<void> {
    if (jobs.length === 0) return this.ticking;
    this.ticking = this.ticking
      .then(() => {
        if (!this.running) return;
        const handled = this.queue.remove(new Set(jobs));
        // A renamed runtime schedule (its handler changed) goes on from where its old name was.
        const byOwner = new Map([...handled].map(([name, after]) => [slotOwner(name), after]));
        for (const name of new Set(jobs)) {
          const job = this.o.registry.get(name);
          if (!job) continue;
          const after = handled.get(name) ?? byOwner.get(slotOwner(name)) ?? sinceMs(name);
          const at = job.schedule.nextAfter(after);
          if (at !== null) this.queue.push({ at, job: name, after });
        }
        this.arm();
        return this.openChangedEras(jobs, sinceMs);
      })
      .catch((err: Error) => this.o.logger.error({ err }, 'reschedule failed'));
    return this.ticking;
  }

  /** Fire a job now, outside its schedule (admin "trigger"). Leader only. */
  async trigger(jobName: string): Promise<CommittedFire> {
    const job = this.o.registry.require(jobName);
    if (!this.running || !this.o.leadership.lease()) throw new NotLeaderError('only the leader can trigger a job');
    const [fire] = await this.commitAndEnqueue(
      [{ job: job.name, scheduledAt: new Date(this.o.clock.now()), trigger: 'manual' }],
      [],
      { keep: true },
    );
    if (!fire) throw new NotLeaderError('the fire was not committed: leadership ended before the commit');
    return fire;
  }

  private arm(): void {
    this.timer?.cancel();
    const next = this.queue.peek();
    if (!this.running || !next) return;
    this.timer = this.o.clock.setTimer(() => void this.tick(), next.at - this.o.clock.now());
  }

  private scheduleOutbox(): void {
    this.outboxTimer = this.o.clock.setTimer(() => void this.outboxRound(), this.o.outboxIntervalMs ?? 1000);
  }

  private async outboxRound(): Promise<void> {
    try {
      await this.sweepOutbox();
    } catch (err) {
      this.o.logger.warn({ err }, 'outbox sweep failed');
    }
    if (this.running) this.scheduleOutbox();
  }

  /** Enqueue runs that were committed but never handed to the queue (crash between the two). */
  async sweepOutbox(): Promise<number> {
    if (!this.running || !this.o.leadership.lease()) return 0;
    const queuedJobs = this.queuedJobs();
    const owns = this.o.owns;
    const runs = await this.handingOver.sweep(async () => {
      const all = await this.o.ledger.unenqueued(500, queuedJobs);
      return owns ? all.filter((r) => owns(r.job)) : all;
    });
    if (runs.length === 0) return 0;
    await this.o.delivery.enqueue(runs);
    await this.o.ledger.markEnqueued(runs.map((r) => r.runId));
    return runs.length;
  }

  /** Jobs whose runs may wait held in the outbox (overlap 'queue', 'coalesce'), worked out again only when the registry's list changes. */
  private queuedJobs(): string[] {
    const jobs = this.o.registry.list();
    if (this.queued?.from !== jobs)
      this.queued = {
        from: jobs,
        names: jobs.filter((j) => j.overlap === 'queue' || j.overlap === 'coalesce').map((j) => j.name),
      };
    return this.queued.names;
  }

  /**
   * Fire what is due, PLAN_CHUNK entries at a time: pop them, plan each job from its entry's `after`
   * (the last instant handled), commit, and only once the commit is through move each entry on to
   * (now, next]. If a commit fails (database blip, connection reset), nothing of that chunk counts
   * as handled: its entries, and the due entries not yet planned, go back with their old `after`,
   * due again after a short backoff, so the retry replans the failed instants together with any
   * that fell due meanwhile, under the misfire policy (invariant I2). Chunks committed before the
   * failure stay handled. Missed instants are reported when their chunk commits, so a retry does
   * not report them twice. In chunks so that a tick of 100,000 due holds a few thousand plans, not
   * 100,000; the hand-overs to the queue go on across chunks (at most HAND_OVERS_IN_FLIGHT).
   */
  private async fireDue(): Promise<void> {
    if (!this.running) return;
    const tenure = this.tenure;
    const now = this.o.clock.now();
    const handOvers: Promise<void>[] = [];
    try {
      for (;;) {
        const due = this.queue.popDue(now, PLAN_CHUNK);
        if (due.length === 0) break;
        if (!(await this.fireChunk(due, now, tenure, handOvers))) return;
      }
    } finally {
      await Promise.all(handOvers); // never rejects
    }
    this.arm();
  }

  /** Plan, commit and move on one chunk of due entries; false when the tick must end here. */
  private async fireChunk(
    due: readonly FireEntry[],
    now: number,
    tenure: number,
    handOvers: Promise<void>[],
  ): Promise<boolean> {
    // Late or several times due (a blocked loop, a wall clock jump, a failed commit): the misfire
    // policy decides.
    const known = due.flatMap((entry) => {
      const job = this.o.registry.get(entry.job);
      return job ? [{ entry, job, after: entry.after }] : [];
    });
    const {
      plans: planned,
      requests,
      missed,
    } = planFires(known, now, (job, at) => fireTrigger(job, at, now, 'schedule'));
    this.arm(); // the other jobs keep their timer while this chunk commits
    try {
      if (requests.length > 0 || missed.length > 0) await this.commitAndEnqueue(requests, missed, { handOvers });
    } catch (err) {
      const current = this.running && this.tenure === tenure;
      const failedAt = this.o.clock.now();
      this.o.logger.error(
        {
          err,
          jobs: planned.length,
          firstJob: planned[0]?.job.name,
          fires: requests.length,
          first: requests[0]?.scheduledAt.toISOString(),
          retryInMs: current ? COMMIT_RETRY_MS : undefined,
        },
        current ? 'fire commit failed; retrying (the fires are kept)' : 'fire commit failed after leadership ended',
      );
      if (!current) return false;
      // This chunk and the due entries not yet planned: the ledger just failed, so all wait the backoff.
      for (const entry of [...planned.map((p) => p.entry), ...this.queue.popDue(now)]) {
        const next = this.o.registry.get(entry.job)?.schedule.nextAfter(now) ?? Infinity;
        this.queue.push({ at: Math.min(next, failedAt + COMMIT_RETRY_MS), job: entry.job, after: entry.after });
      }
      this.arm();
      return false;
    }
    if (!this.running || this.tenure !== tenure) return false;
    for (const { job, plan } of planned) {
      this.reportMissed(job, plan, `fired late; misfire policy "${job.misfire}"`);
      const next = job.schedule.nextAfter(now);
      if (next !== null) this.queue.push({ at: next, job: job.name, after: now });
    }
    return true;
  }

  private reportMissed(job: ScheduledJob, plan: CatchUpPlan, reason: string): void {
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
    this.emit(
      'fire:missed',
      job.name,
      plan.missed.map((t) => new Date(t)),
      reason,
      plan.missedCount,
    );
  }

  /**
   * Apply pause and overlap policies, then commit under the fence and enqueue what was committed,
   * COMMIT_CHUNK fires per transaction: each chunk goes to BullMQ while the next one commits, so a
   * large tick pays for the database and the queue side by side rather than one after the other.
   * Every chunk carries the same leader token through the fence and the unique key (I1, I3).
   * Throws when a commit fails for any reason but a stale token (the caller replans the whole tick;
   * chunks already committed come back as duplicates, never twice); a stale token steps down and
   * returns what was committed before it. At most HAND_OVERS_IN_FLIGHT chunks are being handed to
   * the queue at once (counting the caller's `handOvers`, which it awaits itself), and the fires
   * committed are returned only when `keep` asks for them, so a large commit holds a few chunks in
   * memory, not all of them.
   */
  private async commitAndEnqueue(
    requests: FireRequest[],
    missed: MissedRangeRecord[] = [],
    o: { keep?: boolean; handOvers?: Promise<void>[] } = {},
  ): Promise<CommittedFire[]> {
    const lease = this.o.leadership.lease();
    if (!lease) return [];
    const { fires: shaped, skips } = await this.applyPolicies(requests);
    const committed: CommittedFire[] = [];
    // The caller's hand-overs when it commits several plans in a row (they go on across its calls).
    const handOvers = o.handOvers ?? [];
    const stamp = {
      fenceResource: this.o.fenceResource,
      token: lease.token,
      replicaId: this.o.replicaId,
      stillLeading: () => this.running && this.o.leadership.lease() !== undefined,
    };
    // Chunks committing at once (at most COMMITS_IN_FLIGHT, never two with a job in common: a job's
    // fires commit in order, as its overlap policies need). Each settles to its result or error.
    const inFlight: { first: boolean; jobs: Set<string>; outcome: Promise<FireBatchResult | { failed: unknown }> }[] =
      [];
    let refused = false;
    let failure: { err: unknown } | undefined;
    // The oldest chunk's outcome: its runs handed over, or the refusal or failure remembered.
    const settleOldest = async (): Promise<void> => {
      const c = inFlight.shift()!;
      const result = await c.outcome;
      if ('failed' in result) {
        const err = result.failed;
        if (!(err instanceof StaleTokenError)) {
          failure ??= { err };
          return;
        }
        if (refused) return;
        refused = true;
        this.o.logger.error({ token: lease.token, highest: err.highest }, 'fence refused our fires: stepping down');
        this.emit('fire:refused', err);
        this.o.leadership.stepDown(`fence refused token ${lease.token}: ${err.message}`);
        return;
      }
      if (o.keep) committed.push(...result.committed);
      if (c.first) for (const m of missed) this.emit('occurrences:missed', m.job, m.reason, m.count);
      handOvers.push(this.afterCommit(result, skips));
      if (handOvers.length >= HAND_OVERS_IN_FLIGHT) await handOvers.shift(); // never rejects
    };
    try {
      // The missed ranges go with the first chunk (a chunk of no fires when nothing fires at all).
      for (let i = 0; i < Math.max(shaped.length, missed.length > 0 ? 1 : 0); i += COMMIT_CHUNK) {
        const chunk = shaped.slice(i, i + COMMIT_CHUNK);
        const jobs = new Set(chunk.map((f) => f.job));
        while (
          inFlight.length > 0 &&
          (inFlight.length >= COMMITS_IN_FLIGHT || inFlight.some((c) => [...jobs].some((j) => c.jobs.has(j))))
        )
          await settleOldest();
        if (refused || failure) break;
        const leader = { token: lease.token, replicaId: this.o.replicaId, fires: chunk.length };
        const commit = tracedFireCommit(leader, () => this.o.ledger.commitFires(chunk, stamp, i === 0 ? missed : []));
        inFlight.push({
          first: i === 0,
          jobs,
          outcome: this.handingOver
            .committing(commit, (r) => toDeliver(r).map((f) => f.runId))
            .catch((failed: unknown) => ({ failed })),
        });
      }
      while (inFlight.length > 0) await settleOldest();
      if (failure && !refused) throw failure.err;
    } finally {
      if (!o.handOvers) await Promise.all(handOvers);
    }
    return committed;
  }

  /** Announce one committed chunk and hand its runs to the queue. Never rejects: the outbox retries. */
  private async afterCommit(
    result: FireBatchResult,
    skips: Map<string, { reason: string; level: 'info' | 'warn' }>,
  ): Promise<void> {
    if (result.duplicates > 0) this.emit('fire:duplicate', result.duplicates);
    // Overlap 'replace': the ledger cancelled these runs in the commit, under the fence. Only now
    // may the workers running them be told; a refused batch cancelled nothing.
    if (result.cancelled.length > 0) {
      this.o.logger.info({ runs: result.cancelled.map(String) }, 'overlap "replace": cancelled the running runs');
      try {
        await this.o.delivery.cancel(result.cancelled);
      } catch (err) {
        this.o.logger.warn(
          { err, runs: result.cancelled.map(String) },
          'could not signal the cancel to the workers; the ledger refuses their outcome',
        );
      }
    }
    const now = this.o.clock.now();
    for (const fire of result.committed) {
      if (fire.state !== 'skipped') {
        this.emit('fire:committed', fire, now - fire.scheduledAt.getTime(), fire.trigger);
        continue;
      }
      const skip = skips.get(fireKey(fire.job, fire.scheduledAt));
      const reason = skip?.reason ?? 'skipped';
      this.o.logger[skip?.level ?? 'warn'](
        { job: fire.job, scheduledAt: fire.scheduledAt.toISOString(), reason, runId: fire.runId.toString() },
        `fire skipped: ${reason}`,
      );
      this.emit('fire:skipped', fire.job, fire.scheduledAt, reason);
    }
    const deliver = toDeliver(result);
    if (deliver.length === 0) return;
    let delivered = false;
    try {
      await this.o.delivery.enqueue(deliver);
      await this.o.ledger.markEnqueued(deliver.map((f) => f.runId));
      delivered = true;
    } catch (err) {
      // Committed is committed: the outbox sweep delivers these later.
      this.emit('enqueue:failed', err as Error);
      this.o.logger.warn({ err, runs: deliver.length }, 'enqueue failed; the outbox will retry');
    } finally {
      this.handingOver.ended(
        deliver.map((f) => f.runId),
        delivered,
      );
    }
  }

  /**
   * Shape the requests by the pause and overlap policies. Skipped fires are recorded in the ledger
   * (state 'skipped'); they are logged and emitted once committed, with the reason kept here.
   * Overlap 'replace' only marks the request: the ledger cancels the running runs inside the
   * commit, after the fence accepted our token. Public for the stand-in (stand-in.ts), which must
   * apply the same rules to the slots it commits for a silent leader.
   */
  async applyPolicies(
    requests: FireRequest[],
  ): Promise<{ fires: FireRequest[]; skips: Map<string, { reason: string; level: 'info' | 'warn' }> }> {
    const pauses = await this.o.ledger.pauses();
    const guarded = [...new Set(requests.map((r) => r.job))].filter((name) => {
      const overlap = this.o.registry.get(name)?.overlap ?? 'allow';
      return overlap !== 'allow' && overlap !== 'replace';
    });
    const active = await this.o.ledger.activeJobs(guarded);
    const busy = new Map<string, { active: boolean; waiting: number }>();
    for (const [job, a] of active) busy.set(job, { active: a.ids.length > 0, waiting: a.held });
    const out: FireRequest[] = [];
    const skips = new Map<string, { reason: string; level: 'info' | 'warn' }>();
    for (const r of requests) {
      const job = this.o.registry.get(r.job);
      if (!job) continue;
      const skip = (reason: string, level: 'info' | 'warn') => {
        skips.set(fireKey(r.job, r.scheduledAt), { reason, level });
        out.push({ ...r, state: 'skipped', error: reason });
      };
      // Slots at or after a pause's `until` fire, whether or not the leader has lifted it yet.
      const pause = pauses.get(r.job);
      if (pause && r.trigger !== 'manual' && pauseHolds(pause, r.scheduledAt)) {
        skip(pauseReason(pause), 'info');
        continue;
      }
      const state = busy.get(r.job) ?? { active: false, waiting: 0 };
      switch (job.overlap) {
        case 'allow':
          out.push(r);
          break;
        case 'skip':
          if (state.active) skip('overlap "skip": previous run still active', 'warn');
          else out.push(r);
          busy.set(r.job, { active: true, waiting: 0 });
          break;
        case 'queue':
          if (!state.active) out.push(r);
          else if (state.waiting < job.overlapQueueMax) out.push({ ...r, hold: true });
          else skip(queueFullReason(job.overlapQueueMax), 'warn');
          busy.set(r.job, {
            active: true,
            waiting: state.active ? Math.min(state.waiting + 1, job.overlapQueueMax) : 0,
          });
          break;
        case 'coalesce':
          // One run waits behind the active one and stands for every later slot until it starts.
          if (!state.active) out.push(r);
          else if (state.waiting === 0) out.push({ ...r, hold: true });
          else {
            skips.set(fireKey(r.job, r.scheduledAt), { reason: COALESCED, level: 'info' });
            out.push({ ...r, state: 'skipped', error: COALESCED, coalesce: true });
          }
          busy.set(r.job, { active: true, waiting: state.active ? 1 : 0 });
          break;
        case 'replace':
          out.push({ ...r, replace: true });
          break;
      }
    }
    return { fires: out, skips };
  }
}

/**
 * Plan each job from `after` (the last instant it handled) under its misfire policy: the plans, the
 * fire requests (trigger by `trigger`) and the missed ranges. Shared by a tick and an election's
 * catch-up, which differ only in the trigger.
 */
function planFires<T extends { job: ScheduledJob; after: number | null }>(
  items: readonly T[],
  now: number,
  trigger: (job: ScheduledJob, at: number) => FireTrigger,
): { plans: (T & { plan: CatchUpPlan })[]; requests: FireRequest[]; missed: MissedRangeRecord[] } {
  const plans = items.map((item) => ({ ...item, plan: planJobCatchUp(item.job, item.after, now) }));
  const requests: FireRequest[] = [];
  const missed: MissedRangeRecord[] = [];
  for (const { job, after, plan } of plans) {
    missed.push(...missedRecords(job, plan, after, now));
    for (const at of plan.fire) requests.push({ job: job.name, scheduledAt: new Date(at), trigger: trigger(job, at) });
  }
  return { plans, requests, missed };
}

/** The committed fires the fire path hands to the queue itself (held ones wait in the outbox). */
function toDeliver(result: FireBatchResult): CommittedFire[] {
  return result.committed.filter((f) => f.state === 'pending' && !f.hold);
}

function fireKey(job: string, scheduledAt: Date): string {
  return `${job}@${scheduledAt.getTime()}`;
}
