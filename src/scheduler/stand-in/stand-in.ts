/**
 * Stand-in followers: a leader that crashed keeps its lease until the lease expires (a TTL), and
 * every slot due meanwhile would wait for the next leader's catch-up. The ledger already holds the
 * key that makes a fire exactly once, the unique (job, scheduled_at), so a follower may commit an
 * overdue slot itself: whoever commits first wins, the other insert is a no-op (DBOS fires from
 * every process on the same principle; River, Oban and Kubernetes leave the gap).
 *
 * Rules, so a stand-in fire means the same as the leader's:
 * - only a slot overdue by the grace (learned from the leader's own commit lateness, at most the
 *   replica's standInGraceMs: stand-in-grace.ts), and only the next slot after the job's last
 *   committed one (never leaving a hole the next leader's catch-up could not see): one indexed
 *   read of cw_job_state per check;
 * - a slot the leader is behind on while it commits others of the same check (a burst, a slow
 *   ledger: it is alive) waits the whole standInGraceMs before it is raced;
 * - only while the slot is still on time for its job (within its misfire grace): older slots are
 *   the next leader's catch-up, under the job's misfire policy;
 * - the same pause and overlap rules as the leader (FireLoop.applyPolicies); overlap 'replace' jobs
 *   are left to the leader, since cancelling other runs needs its fence;
 * - committed with the scheduler fence's current token, read under a share lock on the fence row, so
 *   tokens on committed runs never decrease (I3); nothing while no leader ever raised the fence.
 * - by `perJob` followers per job (the replica's standInsPerJob), chosen by a rendezvous hash over the live followers,
 *   so a large cluster reads the ledger twice per slot, not once per follower;
 * - runtime schedules too: every replica keeps them current (schedule-sync.ts), a slot is planned
 *   with the version in effect at its instant and the commit re-checks that version in its own
 *   transaction, exactly as the leader's commit does (schedule-ledger.ts states the rule).
 * - once a check finds the leader committed none of its slots (crashed), the next slots are checked
 *   soon after they are due until a leader commits again, for at most the lease TTL (its lease
 *   ends, a new leader fires): a crash costs its first slot the grace, not every slot until then.
 * Retention, the outbox and re-delivery sweeps, catch-up after an election and 'replace' stay the
 * leader's. A healthy cluster's followers commit nothing: `trigger = 'standin'` counts what they did.
 */
import type { Logger } from 'pino';
import type { Clock, TimerHandle } from '../../clock.js';
import { limitedWarn } from '../../once-per-kind.js';
import type { CommittedFire, FireLedger, FireRequest, LastCommit } from '../../ledger/fire-ledger.js';
import type { FireLoop } from '../firing/fire-loop.js';
import { FireQueue } from '../firing/fire-queue.js';
import { forEachSliced } from '../firing/yielding.js';
import type { RunDelivery } from '../firing/run-delivery.js';
import { rendezvousOwners } from './rendezvous.js';
import { StandInGrace } from './stand-in-grace.js';
import { slotOwner } from '../../cron/job-names.js';
import type { Reschedulable } from '../schedules/schedule-sync.js';
import type { ScheduledJobs } from '../../cron/scheduled-job.js';

export interface StandInOptions {
  registry: ScheduledJobs;
  ledger: Pick<FireLedger, 'lastCommitsOf' | 'commitStandInFires' | 'markEnqueued'>;
  delivery: Pick<RunDelivery, 'enqueue'>;
  /** The leader's pause and overlap rules, applied to the stand-in's slots too. */
  policies: Pick<FireLoop, 'applyPolicies'>;
  /** Names a runtime schedule fire's version and payload, as on the leader's way to its commit. */
  annotate?: (fires: FireRequest[]) => FireRequest[];
  /** True while this replica leads: the leader fires, its stand-in rests. */
  isLeading: () => boolean;
  clock: Clock;
  logger: Logger;
  replicaId: string;
  fenceResource: string;
  /**
   * The most a follower waits past a slot for the leader's commit before it commits the slot itself
   * (it waits less once it has seen the leader commit sooner: stand-in-grace.ts); 0: off.
   */
  graceMs: number;
  /**
   * The lease TTL: how long a crashed leader holds its lease. A leader found missing counts as
   * missing this long (its slots checked soon after they are due) unless it is seen again first.
   */
  leaseTtlMs: number;
  /**
   * How many followers stand in for each job, chosen per job by a rendezvous hash over `followers`
   * (so 100 replicas do not all read the ledger for every slot); 0 or no list: every follower.
   */
  perJob?: number;
  /** The live followers' replica ids, as last seen (member rows). */
  followers?: () => readonly string[] | undefined;
  onCommitted?: (fire: CommittedFire, latenessMs: number) => void;
}

/**
 * Grace added per slot of a check: a leader commits about 10,000 fires a second here, so a burst of
 * 1,000 slots due together gives it 100 ms more before a follower looks (and finds its first
 * chunks committed: alive, the rest get the whole grace), where a lone slot gives it nothing more.
 */
const BURST_MS_PER_SLOT = 0.1;

interface Check {
  /** When to look: the slot plus the grace. */
  at: number;
  job: string;
  slot: number;
  /** A second look, at the whole configured grace, at a slot the leader was behind on while alive. */
  deferred?: boolean;
}

export class StandIn implements Reschedulable {
  private readonly queue = new FireQueue<Check>();
  /** Each job's one live check (its slot): a reschedule makes the queued one stale, not doubled. */
  private readonly nextSlot = new Map<string, number>();
  private timer: TimerHandle | undefined;
  private running = false;
  private checking: Promise<void> = Promise.resolve();
  /** A crashed leader makes every follower stand in each second until the next election: say it rarely. */
  private readonly warn: ReturnType<typeof limitedWarn>;
  private readonly grace: StandInGrace;

  constructor(private readonly o: StandInOptions) {
    this.warn = limitedWarn(o.logger, () => o.clock.monotonic(), 10_000);
    this.grace = new StandInGrace(o.graceMs, o.clock);
  }

  /** How long past a slot this follower waits now (see stand-in-grace.ts). */
  get graceMs(): number {
    return this.grace.current();
  }

  /** Resolves once every job's next check is queued: in slices, so a million jobs never block renewals. */
  async start(): Promise<void> {
    if (this.running || this.o.graceMs <= 0) return;
    this.running = true;
    const now = this.o.clock.now();
    const grace = this.grace.current();
    const loaded = await forEachSliced(
      this.o.registry.list(),
      (job) => this.pushNext(job.name, now, grace),
      () => this.running,
    );
    if (loaded) this.arm();
  }

  stop(): void {
    this.running = false;
    this.timer?.cancel();
    this.timer = undefined;
    this.queue.clear();
    this.nextSlot.clear();
  }

  /**
   * Some schedules changed (runtime schedules): plan each one's next check again, from its change
   * (or from now, for an old one) but never past the slot it was waiting for, which the changed
   * schedule may still hold (a version's slots run until the next version takes effect).
   */
  reschedule(jobs: readonly string[], sinceMs: (job: string) => number): Promise<void> {
    if (!this.running) return Promise.resolve();
    const grace = this.grace.current();
    const floor = this.o.clock.now() - grace;
    for (const job of new Set(jobs)) {
      const waiting = this.nextSlot.get(job);
      this.nextSlot.delete(job);
      this.pushNext(job, Math.min(Math.max(sinceMs(job), floor), (waiting ?? Infinity) - 1), grace);
    }
    this.arm();
    return Promise.resolve();
  }

  /** Look at every slot whose grace has run out. Called by the timer; safe to call at any time. */
  check(): Promise<void> {
    this.checking = this.checking
      .then(() => this.checkDue())
      .catch((err: Error) => {
        this.o.logger.warn({ err }, 'stand-in check failed; the leader or the next check fires the slots');
      });
    return this.checking;
  }

  /** Queue the job's next slot after `afterMs`, to be checked `graceMs` after it (read once per caller, not per job). */
  private pushNext(name: string, afterMs: number, graceMs: number): void {
    const job = this.o.registry.get(name);
    const slot = job && job.overlap !== 'replace' ? job.schedule.nextAfter(afterMs) : null;
    if (slot === null) {
      this.nextSlot.delete(name);
      return;
    }
    if (this.nextSlot.get(name) === slot) return; // already queued
    this.nextSlot.set(name, slot);
    this.queue.push({ at: slot + graceMs, job: name, slot });
  }

  private arm(): void {
    this.timer?.cancel();
    const next = this.queue.peek();
    if (!this.running || !next) return;
    this.timer = this.o.clock.setTimer(() => void this.check(), next.at - this.o.clock.now());
  }

  private async checkDue(): Promise<void> {
    if (!this.running) return;
    const now = this.o.clock.now();
    const live = this.liveChecks(this.queue.popDue(now));
    const learned = this.grace.current();
    // A burst of slots due at once takes the leader longer to commit (its first chunk too): more grace.
    const grace = Math.min(this.grace.ceiling, learned + live.length * BURST_MS_PER_SLOT);
    const due: Check[] = [];
    for (const c of live) {
      // Queued under a shorter grace than the one learned since: look again then.
      if (!c.deferred && c.slot + grace > now) this.queue.push({ ...c, at: c.slot + grace });
      else due.push(c);
    }
    // Each job moves on to its next slot after the newest one that is already overdue.
    for (const c of due) if (!c.deferred) this.pushNext(c.job, Math.max(c.slot, now - grace), learned);
    this.arm();
    if (due.length === 0 || this.o.isLeading()) return;
    const onTime = due.filter((c) => {
      const job = this.o.registry.get(c.job);
      return job !== undefined && now - c.slot <= job.misfireGraceMs && this.standsInFor(c.job);
    });
    if (onTime.length === 0) return;
    const last = await this.o.ledger.lastCommitsOf([...new Set(onTime.map((c) => c.job))]);
    const leaderAlive = this.learn(onTime, last);
    // Found missing at the learned grace (not by a quick check, so the hold is not renewed by them).
    if (!leaderAlive && !this.grace.leaderMissing) {
      this.grace.leaderMissed(this.o.leaseTtlMs);
      this.lookSooner(due.map((c) => c.job));
    }
    const missing = onTime.filter((c) => this.nextAfterLast(c, last.get(slotOwner(c.job))?.slot));
    const ceiling = this.grace.ceiling;
    const later = new Set(leaderAlive ? missing.filter((c) => !c.deferred && now - c.slot < ceiling) : []);
    for (const c of later) this.queue.push({ at: c.slot + ceiling, job: c.job, slot: c.slot, deferred: true });
    if (later.size > 0) this.arm();
    const overdue = missing.filter((c) => !later.has(c));
    if (overdue.length === 0 || this.o.isLeading()) return;
    await this.commit(overdue.map((c) => ({ job: c.job, scheduledAt: new Date(c.slot), trigger: 'standin' })));
  }

  /**
   * Learn the leader's commit lateness from the checked slots it fired on time (not a stand-in's
   * commits, nor a new leader's catch-up), and answer whether it committed any of them: alive,
   * if perhaps behind.
   */
  private learn(checks: readonly Check[], last: Map<string, LastCommit>): boolean {
    let alive = false;
    for (const c of checks) {
      const l = last.get(slotOwner(c.job));
      if (!l || l.trigger === null || l.trigger === 'standin' || l.slot.getTime() < c.slot) continue;
      alive = true;
      if (l.trigger === 'schedule' && l.slot.getTime() === c.slot && l.committedAt)
        this.grace.observe(l.committedAt.getTime() - c.slot);
    }
    if (alive) this.grace.leaderSeen();
    return alive;
  }

  /**
   * Queue the jobs' next checks again at the grace now (shorter: the leader is missing). Their
   * checks queued at the longer grace find the job moved on by then, and are dropped.
   */
  private lookSooner(jobs: readonly string[]): void {
    const grace = this.grace.current();
    for (const job of new Set(jobs)) {
      const slot = this.nextSlot.get(job);
      if (slot !== undefined) this.queue.push({ at: slot + grace, job, slot });
    }
    this.arm();
  }

  /**
   * Whether `c` is the job's next slot after its last committed one. A stand-in never leaves a hole:
   * a slot it skipped (checked too late, past the job's misfire grace) is the next leader's catch-up,
   * which starts after the job's last committed slot, so committing a later slot would lose it.
   */
  private nextAfterLast(c: Check, last: Date | undefined): boolean {
    if (last === undefined) return true; // never fired: a new leader would start from its election too
    return this.o.registry.get(c.job)?.schedule.nextAfter(last.getTime()) === c.slot;
  }

  /** Whether this replica is one of the job's `perJob` stand-ins among the live followers. */
  private standsInFor(job: string): boolean {
    const k = this.o.perJob ?? 0;
    const seen = this.o.followers?.();
    if (k <= 0 || !seen || seen.length <= k) return true;
    const self = this.o.replicaId;
    // A list read before this replica's own row (or while it led) still counts it.
    const followers = seen.includes(self) ? seen : [...seen, self];
    return rendezvousOwners(job, followers, k).includes(self);
  }

  /**
   * The checks still current: a rescheduled job's older check is dropped (a deferred one is a
   * second look at its own slot, and stays), and a job is checked once per round.
   */
  private liveChecks(popped: Check[]): Check[] {
    const seen = new Set<string>();
    return popped.filter((c) => {
      if ((!c.deferred && this.nextSlot.get(c.job) !== c.slot) || seen.has(c.job)) return false;
      seen.add(c.job);
      return true;
    });
  }

  private async commit(requests: FireRequest[]): Promise<void> {
    const { fires } = await this.o.policies.applyPolicies(this.o.annotate?.(requests) ?? requests);
    const result = await this.o.ledger.commitStandInFires(fires, {
      fenceResource: this.o.fenceResource,
      replicaId: this.o.replicaId,
    });
    if (result.committed.length === 0) return;
    const now = this.o.clock.now();
    this.warn(
      'stand-in',
      {
        fires: result.committed.length,
        jobs: [...new Set(result.committed.map((f) => f.job))].slice(0, 10),
        first: result.committed[0]?.scheduledAt.toISOString(),
      },
      'the leader did not commit overdue slots: committed them as a stand-in',
    );
    for (const fire of result.committed) this.o.onCommitted?.(fire, now - fire.scheduledAt.getTime());
    const deliver = result.committed.filter((f) => f.state === 'pending' && !f.hold);
    if (deliver.length === 0) return;
    try {
      await this.o.delivery.enqueue(deliver);
      await this.o.ledger.markEnqueued(deliver.map((f) => f.runId));
    } catch (err) {
      // Committed is committed: the (next) leader's outbox hands these over.
      this.o.logger.warn({ err, runs: deliver.length }, "stand-in enqueue failed; the leader's outbox will retry");
    }
  }
}
