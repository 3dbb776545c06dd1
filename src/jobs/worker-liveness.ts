/**
 * A worker's part in handing out the runs of dead workers: it beats its liveness row a few times
 * per window, and once a second (with a place in hand free; less often behind a large backlog,
 * POLL_SPACING) asks the ledger for runs whose worker stopped beating, as many as it has places,
 * and delivers them to itself (and asks again as soon as a full page is claimed). A run whose
 * worker was killed mid-handler starts again within the window plus a poll, on whichever live
 * worker asks first (the claim decides; SKIP LOCKED keeps two askers apart), with no queue and no
 * leader in the way.
 *
 * A worker killed and started again under its name within its window (a supervisor's restart)
 * finds its row still beating: no other worker sees its earlier start's runs as orphans. So as it
 * starts, a worker claims again what the ledger says is running for it. The question goes out
 * before it takes any delivery, so its snapshot holds none of this start's claims: what it
 * answers is an earlier start's.
 *
 * A dead worker's deliveries with runs it had not claimed yet are not in the ledger's hands: each
 * poll also moves them back to the queue once their owner's key in Redis ran out, and a worker
 * started again under its name moves back its earlier start's at once (dead-deliveries.ts).
 */
import type { Logger } from 'pino';
import type { Clock, TimerHandle } from '../clock.js';
import type { RunLedger } from '../ledger/run-ledger.js';
import type { DeadDeliveries } from './dead-deliveries.js';

/**
 * The ledger finds orphans among the unfinished runs (cw_open_runs, each run then read by its id):
 * about 1.8 µs an unfinished run here, 175 ms at 100,000 and 18 ms at 10,000. A worker with places
 * free asks while such a backlog waits (on a concurrency key, a rate limit, a backoff), so the next
 * poll waits at least this many times as long as the last question took: each worker then spends at
 * most a tenth of a PostgreSQL backend on it. A million waiting runs took 64% of one a worker (a
 * 1.75 s question every 2.75 s), now 15% (the spacing stops at a window, 10 s by default); 100,000
 * took 15%, now 9%. The cost: a dead worker's run waits the window plus 1.75 s behind 100,000
 * waiting runs, not plus 1 s.
 */
export const POLL_SPACING = 10;

export type LivenessLedger = Pick<
  RunLedger,
  'beat' | 'forget' | 'orphans' | 'claimedBy' | 'releaseEarlierSlots' | 'claimerLiveWithinMs'
>;

export interface WorkerLivenessOptions {
  ledger: LivenessLedger;
  worker: string;
  clock: Clock;
  logger: Logger;
  /** Places free now for runs claimed here, as for a delivery's (no poll while none is). */
  freePlaces: () => number;
  /** Deliver an orphaned run here; resolves once the claim is decided: true when claimed here. */
  deliver: (runId: bigint) => Promise<boolean>;
  /**
   * The worker's BullMQ deliveries, beaten with its ledger row and swept at each poll
   * (dead-deliveries.ts): undefined until its BullMQ worker exists.
   */
  deliveries?: () => Pick<DeadDeliveries, 'beat' | 'sweep'> | undefined;
}

export class WorkerLiveness {
  private beatTimer: TimerHandle | undefined;
  private pollTimer: TimerHandle | undefined;
  private stopped = false;
  /** The slots an earlier start of this worker held for runs that ended are free (see start()). */
  private earlierSlotsDone = false;
  /** The runs an earlier start of this worker left running are delivered here (see above). */
  private earlierStartDone = false;
  /** The question for them, while it is asked (start() and a poll never ask it twice at once). */
  private earlierRuns: Promise<void> | undefined;
  private sweeping = false;
  /** How long the last question for orphans took (ms). */
  private lastAskMs = 0;

  constructor(private readonly o: WorkerLivenessOptions) {}

  /** How often this worker beats: three times per window, so one late beat is not a death. */
  get beatEveryMs(): number {
    return Math.max(50, Math.floor(this.o.ledger.claimerLiveWithinMs / 3));
  }

  /** How often it looks for orphans: at most a second, so a dead worker costs the window + 1 s. */
  get pollEveryMs(): number {
    return Math.max(50, Math.min(1000, Math.floor(this.o.ledger.claimerLiveWithinMs / 2)));
  }

  /**
   * When to look again: a poll from now, or POLL_SPACING times the last question's time if longer,
   * but never more than a window (one slow answer, a checkpoint's, must not hold takeovers back).
   */
  private get nextPollInMs(): number {
    const spaced = Math.min(POLL_SPACING * this.lastAskMs, this.o.ledger.claimerLiveWithinMs);
    return Math.max(this.pollEveryMs, spaced);
  }

  /**
   * Beat once (a claim made before the first beat would look orphaned), free the concurrency slots
   * an earlier start held for runs that ended, then keep beating and polling; called before the
   * worker takes any delivery. What an earlier start left running is claimed again here beside the
   * first deliveries, not before them: the question reads every unfinished run (18 ms at 10,000,
   * 175 ms at 100,000), and a delivery of such a run is claimed here once either way (RunExecutor
   * never claims a run it holds). Both are tried again at each poll should the ledger not answer.
   */
  async start(): Promise<void> {
    await this.beat();
    // Before any delivery: a limited run claimed here must not find a slot the earlier start holds.
    await this.earlierSlots();
    void this.earlierStart();
    this.scheduleBeat();
    this.schedulePoll();
  }

  /** Free the slots an earlier start held for runs that ended; false if the ledger did not answer. */
  private async earlierSlots(): Promise<boolean> {
    if (this.earlierSlotsDone) return true;
    try {
      const freed = await this.o.ledger.releaseEarlierSlots(this.o.worker);
      this.earlierSlotsDone = true;
      if (freed > 0)
        this.o.logger.warn({ slots: freed }, 'concurrency slots an earlier start of this worker held: freed');
      return true;
    } catch (err) {
      this.o.logger.warn({ err: (err as Error).message }, 'could not free the slots an earlier start held');
      return false;
    }
  }

  /** Claim again here the runs an earlier start of this worker left running (once answered). */
  private earlierStart(): Promise<void> {
    if (this.earlierStartDone) return Promise.resolve();
    this.earlierRuns ??= this.claimEarlierRuns().finally(() => (this.earlierRuns = undefined));
    return this.earlierRuns;
  }

  private async claimEarlierRuns(): Promise<void> {
    // Its slots first: a run it left running keeps its own when claimed again below.
    if (!(await this.earlierSlots())) return;
    try {
      const runs = await this.o.ledger.claimedBy(this.o.worker);
      this.earlierStartDone = true;
      if (runs.length > 0)
        this.o.logger.warn(
          { runs: runs.map(String) },
          'runs an earlier start of this worker left running: claiming them again here',
        );
      for (const runId of runs) if (!this.stopped) void this.o.deliver(runId);
    } catch (err) {
      this.o.logger.warn({ err: (err as Error).message }, 'could not look for runs an earlier start left running');
    }
  }

  private scheduleBeat(): void {
    if (this.stopped) return;
    this.beatTimer = this.o.clock.setTimer(() => {
      void this.beat().finally(() => this.scheduleBeat());
    }, this.beatEveryMs);
  }

  private schedulePoll(delayMs = this.nextPollInMs): void {
    if (this.stopped) return;
    this.pollTimer = this.o.clock.setTimer(() => {
      void this.poll().then(
        (more) => this.schedulePoll(more ? 0 : undefined),
        () => this.schedulePoll(),
      );
    }, delayMs);
  }

  private async beat(): Promise<void> {
    // Not waited for: a Redis that does not answer must not hold up the ledger's beats.
    void this.o
      .deliveries?.()
      ?.beat()
      .catch((err: Error) => {
        this.o.logger.warn({ err: err.message }, 'worker heartbeat in Redis failed');
      });
    await this.o.ledger.beat(this.o.worker).catch((err: Error) => {
      this.o.logger.warn({ err: err.message }, 'worker heartbeat failed');
    });
  }

  /**
   * Dead workers' deliveries back to the queue (dead-deliveries.ts), whatever places are free here;
   * one sweep at a time, beside the orphan poll rather than before it (Redis may not answer).
   */
  private sweepDeliveries(): void {
    if (this.sweeping) return;
    this.sweeping = true;
    void this.sweepOnce().finally(() => (this.sweeping = false));
  }

  private async sweepOnce(): Promise<void> {
    try {
      const moved = (await this.o.deliveries?.()?.sweep()) ?? 0;
      if (moved > 0)
        this.o.logger.warn({ deliveries: moved }, 'deliveries of a worker that stopped beating: back to the queue');
    } catch (err) {
      if (!this.stopped)
        this.o.logger.warn({ err: (err as Error).message }, 'could not look for deliveries of dead workers');
    }
  }

  /**
   * Claim here as many runs of dead workers as there are places free. True when that filled them
   * (more may be waiting) and some were claimed here: the next page is asked for as soon as these
   * are claimed, not a poll later, so a dead worker's runs claimed ahead (up to 32 a slot) are not
   * handed out a few a poll. A page none of whose runs could be claimed (their rows held by another
   * statement, taken by another worker) waits for the next poll, so asking again cannot spin.
   */
  private async poll(): Promise<boolean> {
    await this.earlierStart();
    this.sweepDeliveries();
    const free = this.o.freePlaces();
    if (free < 1 || this.stopped) return false;
    let orphans: bigint[];
    const askedAt = this.o.clock.monotonic();
    try {
      orphans = await this.o.ledger.orphans(this.o.worker, free);
    } catch (err) {
      this.o.logger.warn({ err: (err as Error).message }, 'could not look for orphaned runs');
      return false;
    }
    // Answered questions only: a ledger that timed out says nothing of what a question costs.
    this.lastAskMs = this.o.clock.monotonic() - askedAt;
    if (orphans.length > 0)
      this.o.logger.warn({ runs: orphans.map(String) }, 'runs whose worker stopped beating: claiming them here');
    const claims: Promise<boolean>[] = [];
    for (const runId of orphans) if (!this.stopped) claims.push(this.o.deliver(runId));
    const claimedHere = await Promise.all(claims);
    return orphans.length === free && claimedHere.includes(true) && !this.stopped;
  }

  /** Stop beating and polling, and remove the row: what this worker still holds goes to others at once. */
  async stop(): Promise<void> {
    this.stopped = true;
    this.beatTimer?.cancel();
    this.pollTimer?.cancel();
    await this.o.ledger.forget(this.o.worker).catch((err: Error) => {
      this.o.logger.warn(
        { err: err.message },
        'could not remove the worker row; its runs go to others after its window',
      );
    });
  }
}
