import { context } from '@opentelemetry/api';
import type { Logger } from 'pino';
import { systemClock, type Clock } from '../clock.js';
import { AbortedError, BackendUnavailableError, InvalidArgumentError, StaleTokenError } from '../errors.js';
import type { Claim, ClaimResult, RunLedger } from '../ledger/run-ledger.js';
import { handlerOf } from '../scheduler/schedules/runtime-schedules.js';
import { Attempt, type HandlerOutcome } from './attempt.js';
import { AttemptReport } from './attempt-report.js';
import type { AttemptMetrics } from './attempt-metrics.js';
import type { JobRegistry } from './job-registry.js';
import { ledgerCall } from './ledger-call.js';
import { INTERRUPTED, messageOf, needsRunState, settle, type Settlement } from './settlement.js';
import { isWorkflow, type WorkflowDefinition } from './define-workflow.js';
import {
  jobRunnable,
  startWorkflowRun,
  stepRunnable,
  type Runnable,
  type WorkerWorkflowLedger,
} from './workflow-step.js';
import type { ReadyStepRun } from '../ledger/workflow-ledger.js';
import type { JobDefinition } from './define-job.js';
import { FlowControl, isLimited, type Admission, type FlowLedger, type Redeliver } from './flow-control.js';
import type { RegisteredStep } from './job-registry.js';
import { handBackDelayMs, retryDelayMs } from './retry-backoff.js';
import type { SlotLoan } from './slot-loan.js';
import { runLogger, type RunLog } from './run-logger.js';

export { idempotencyKey } from './idempotency-key.js';
export { INTERRUPTED } from './settlement.js';

export type ExecutionStatus =
  /** The handler finished and the run is recorded completed by this attempt. */
  | 'completed'
  /** A workflow run's claim: it is started (its first steps made), its steps do the rest. */
  | 'started'
  /** The run was already finished (a re-delivery after the work was done): nothing ran. */
  | 'skipped'
  /** Another live attempt holds the run, or its retry is not due yet: this delivery did nothing. */
  | 'busy'
  /** Its concurrency key had no free slot: it waits in the ledger, delivered again when one frees. */
  | 'waiting'
  /** Another statement held the run's row at the claim: deliver it again in a moment. */
  | 'locked'
  /** Delivered before its retry's backoff or its step's delay was over: deliver it again then (waitMs). */
  | 'early'
  /** A newer attempt took the run over while this one ran; its outcome was not recorded. */
  | 'stale'
  /** The leader cancelled the run (overlap 'replace'). */
  | 'cancelled'
  /** A later slot of a resource this run fences wrote first: settled without its effect. */
  | 'superseded'
  /**
   * This replica is shutting down: the attempt was recorded as interrupted (ledger state
   * 'retrying') and the run must be handed back to the queue for another replica, without
   * counting as one of the job's retries.
   */
  | 'interrupted'
  /**
   * This replica does not define the run's job (a rolling deploy that added it): the run was
   * handed back ('retrying', with the reason) for a replica that knows it, without using a retry.
   */
  | 'unknown-job';

export interface ExecutionResult {
  status: ExecutionStatus;
  runId: string;
  /** 'early': claimable in this many ms. */
  waitMs?: number;
  attempt?: number;
  token?: string;
}

/** Messages on the control channel shared by all replicas. */
export type ControlMessage = { type: 'claimed'; runId: string; token: string } | { type: 'cancel'; runIds: string[] };

/** The ledger operations the executor uses: a seam, so unit tests can pass an in-memory ledger. */
export type ExecutorLedger = Pick<RunLedger, 'claim' | 'fenceRun' | 'completeInTransaction' | 'finish' | 'runState'>;

export type { Redeliver } from './flow-control.js';

export interface RunExecutorOptions {
  ledger: ExecutorLedger;
  registry: JobRegistry;
  replicaId: string;
  logger: Logger;
  /** Concurrency and rate limits (flow-control.ts); required once a job or step has one. */
  limits?: FlowLedger;
  /** Workflow runs' steps (start, input, completion with progress, failure); required once a workflow is defined. */
  workflows?: WorkerWorkflowLedger;
  /** Hand step runs made ready to the queue (enqueue, and mark them handed over). */
  deliverSteps?: (runs: readonly ReadyStepRun[]) => Promise<void>;
  /** Tell the other replicas a run was claimed, so an older attempt aborts. */
  publish?: (message: ControlMessage) => Promise<void>;
  /**
   * Hand a run back to the queue: its next attempt after a failure (the job's backoff), or another
   * replica's turn after a shutdown or an unknown job. Without it (unit tests), nothing is queued.
   */
  redeliver?: Redeliver;
  /** For the waits between tries of an outcome record while the ledger is unreachable. */
  clock?: Clock;
  /** Where each ended attempt is counted (the replica's run-attempt metrics). */
  metrics?: AttemptMetrics;
}

export interface ExecuteOptions {
  /**
   * No retry will follow a failure of this attempt. Default: from the ledger, once the handler
   * failed as many attempts of this run as the job has retries.
   */
  finalAttempt?: boolean;
  /**
   * Aborted when this replica shuts down (after the grace period). A handler that stops because
   * of it is not failed: the attempt is recorded as interrupted and the result is 'interrupted'.
   */
  signal?: AbortSignal;
  /**
   * Aborted when the handler had its chance to stop after `signal` and did not: stop waiting for
   * it, record the attempt as interrupted and return 'interrupted'. From then on the abandoned
   * handler's ctx.transaction and ctx.fence are refused (AbortedError).
   */
  abandon?: AbortSignal;
  /** The trace context of the fire that committed the run (W3C traceparent), if it was traced. */
  traceparent?: string;
  /** Called once the claim is decided (claimed here: true; or not, or failed), before the handler starts. */
  onClaimed?: (claimedHere: boolean) => void;
  /**
   * Awaited after the claim: true once a handler slot is this run's; false when the replica is
   * closing first (the run is then handed back, interrupted before its handler started).
   */
  startWhen?: () => Promise<boolean>;
  /** Called when the handler is over, before its outcome is recorded (its slot serves the next run). */
  onHandlerDone?: () => void;
  /** The handler's slot, lent while its ctx.transaction waits on a group commit (slot-loan.ts). */
  slotLoan?: SlotLoan;
}

/**
 * Runs one delivery of one run in three steps: claim it in the ledger (an execution token), run
 * the handler through an Attempt, settle the attempt (settlement.ts decides, this records). Knows
 * nothing of BullMQ; bullmq-worker.ts feeds it.
 */
export class RunExecutor {
  private readonly running = new Map<string, Attempt>();
  /** Runs being claimed or run here: a second delivery of one of them does nothing. */
  private readonly inHand = new Set<string>();
  private readonly flow: FlowControl;
  private readonly clock: Clock;

  constructor(private readonly o: RunExecutorOptions) {
    this.clock = o.clock ?? systemClock;
    this.flow = new FlowControl({ ledger: o.limits, worker: o.replicaId, redeliver: o.redeliver });
  }

  /** The replica this executor claims runs for. */
  get replicaId(): string {
    return this.o.replicaId;
  }

  /** Set how claims are announced (the worker's Redis publisher, once it exists). */
  setPublisher(publish: (message: ControlMessage) => Promise<void>): void {
    this.o.publish = publish;
  }

  /** React to another replica's claim or a cancel: abort the attempts it makes stale. */
  onControl(message: ControlMessage): void {
    if (message.type === 'claimed') {
      const mine = this.running.get(message.runId);
      if (mine && mine.claim.token < BigInt(message.token)) {
        mine.abortBy(new StaleTokenError(`run ${message.runId}`, mine.claim.token, BigInt(message.token)));
      }
    } else {
      for (const id of message.runIds)
        this.running.get(id)?.abortBy(new AbortedError(`run ${id} (cancelled: overlap "replace")`));
    }
  }

  /**
   * Execute one delivery. Resolves with the status; rejects with the handler's error when it
   * failed (so the queue retries it or marks it failed). An attempt stopped by the replica's
   * shutdown (options.signal, options.abandon) resolves 'interrupted' instead: the caller hands
   * the run back to the queue.
   */
  async execute(runId: bigint, options: ExecuteOptions): Promise<ExecutionResult> {
    // A span for the attempt and one log line when it is over (attempt-report.ts).
    const report = new AttemptReport(
      runId,
      this.o.replicaId,
      options.traceparent,
      this.o.logger,
      this.clock,
      this.o.metrics,
    );
    try {
      const result = await context.with(report.context, () => this.claimAndRun(runId, options, report));
      report.finished(result.status);
      return result;
    } catch (err) {
      report.failed(err);
      throw err;
    }
  }

  private async claimAndRun(runId: bigint, options: ExecuteOptions, report: AttemptReport): Promise<ExecutionResult> {
    const id = runId.toString();
    // Delivered while this replica is already shutting down: do not even claim it.
    if (options.signal?.aborted) return { status: 'interrupted', runId: id };
    // Being claimed or run here already (a duplicate delivery): leave it to the attempt in hand.
    if (this.inHand.has(id)) {
      options.onClaimed?.(false);
      return { status: 'busy', runId: id };
    }
    this.inHand.add(id);
    try {
      // The ledger unreachable: nothing ran, so the delivery is simply tried again later (the
      // worker delays it without using up an attempt); a failed BullMQ job would strand the run
      // 'pending'.
      let claimed: ClaimResult;
      try {
        claimed = await ledgerCall(`claim of run ${id}`, () => this.o.ledger.claim(runId, this.o.replicaId));
      } catch (err) {
        options.onClaimed?.(false);
        throw err;
      }
      options.onClaimed?.(claimed.status === 'claimed');
      if (claimed.status !== 'claimed') return this.notClaimed(claimed, id, report);
      return await this.runClaimed(claimed.claim, options, report);
    } finally {
      this.inHand.delete(id);
    }
  }

  /** A delivery whose claim was refused: nothing runs. */
  private notClaimed(
    claimed: Exclude<ClaimResult, { status: 'claimed' }>,
    id: string,
    report: AttemptReport,
  ): ExecutionResult {
    const { state } = claimed;
    if (claimed.status === 'busy' || claimed.status === 'locked' || claimed.status === 'early') {
      this.o.logger.debug({ runId: id, state, status: claimed.status }, 'run not claimed');
      return {
        status: claimed.status,
        runId: id,
        ...(claimed.status === 'early' ? { waitMs: claimed.waitMs } : {}),
      };
    }
    this.o.logger.info({ runId: id, state }, 'delivery skipped: run already finished');
    report.alreadyFinished(claimed.status === 'finished' ? claimed.job : undefined);
    return { status: 'skipped', runId: id };
  }

  /** A run claimed by this delivery: what its job is, its flow control, then its handler. */
  private async runClaimed(claim: Claim, options: ExecuteOptions, report: AttemptReport): Promise<ExecutionResult> {
    report.claimed(claim);
    const log = runLogger(this.o.logger, claim);
    // A workflow step's run ("<workflow>@<fingerprint>:<step>") runs that step of that definition; a
    // runtime schedule's run ("<handler>/<id>") runs its handler.
    const step = this.o.registry.step(claim.job);
    const job = step ? undefined : this.o.registry.get(handlerOf(claim.job));
    if (!step && !job) return this.handBackUnknown(claim, log);
    if (job && isWorkflow(job)) return this.startWorkflow(claim, job, log);
    // A run taken over from a worker that stopped beating: announced without waiting, so that
    // attempt stops sooner if it wakes; the ledger's token check, not this message, refuses its
    // writes. A first claim has no older attempt to tell.
    if (claim.tookOverFrom !== undefined) {
      log().warn({ from: claim.tookOverFrom }, 'took over a run whose worker stopped beating');
      void this.o
        .publish?.({ type: 'claimed', runId: claim.runId.toString(), token: claim.token.toString() })
        .catch((err: Error) => {
          log().warn({ err }, 'could not announce the claim');
        });
    }
    // Flow control: a slot of its concurrency key and its turn under its rate limit, or it waits
    // in the ledger. A job with neither goes straight on (no promise of its own: the common case).
    const policy = step ? step.spec.job : job!;
    if (!isLimited(policy)) return this.runHolding(claim, step, job, options, report, log);
    let admission: Admission;
    try {
      admission = await this.flow.admit(claim, policy, log());
    } catch (err) {
      if (!(err instanceof InvalidArgumentError)) throw err;
      // The job's key function threw or gave a bad key: a failure of the run, as its handler's would be.
      await ledgerCall(`record the failure of run ${claim.runId}`, () =>
        this.o.ledger.finish(claim, 'failed', err, { failure: true }),
      );
      log().error({ err }, 'run failed: its flow control key could not be computed');
      throw err;
    }
    if (admission.status === 'waiting') return result('waiting', claim);
    try {
      return await this.runHolding(claim, step, job, options, report, log);
    } finally {
      await admission.done();
    }
  }

  /** Run a claimed run (holding its concurrency slot, if it has a limit): the handler, then its settlement. */
  private async runHolding(
    claim: Claim,
    step: RegisteredStep | undefined,
    job: JobDefinition | undefined,
    options: ExecuteOptions,
    report: AttemptReport,
    log: RunLog,
  ): Promise<ExecutionResult> {
    if (options.startWhen && !(await options.startWhen()))
      return this.interrupt(claim, log, `${INTERRUPTED} before its handler started`);
    const runnable = step
      ? await stepRunnable(step, claim, { runs: this.o.ledger, workflows: this.workflows() })
      : jobRunnable(job!, claim, this.o.ledger);
    const attempt = new Attempt(claim, runnable.job, runnable.ledger, log, options.signal, options.slotLoan);
    const id = claim.runId.toString();
    this.running.set(id, attempt);
    try {
      let outcome: HandlerOutcome;
      try {
        outcome = await attempt.run(options.abandon);
      } finally {
        options.onHandlerDone?.();
      }
      try {
        const held = runnable.held?.();
        if (held) {
          // A step's ctx.transaction, held open: it commits with the result the step returned.
          if (outcome.kind === 'returned')
            return result((await this.commitHeld(held, attempt, runnable)) ? 'completed' : 'stale', claim);
          await held.rollback().catch(() => undefined);
          attempt.transaction = 'none'; // nothing of it committed: the step's outcome is its error
        }
        const run = needsRunState(outcome, attempt.transaction)
          ? await ledgerCall(`read the state of run ${id}`, () => this.o.ledger.runState(claim.runId))
          : undefined;
        report.finalAttempt = options.finalAttempt ?? claim.failures >= runnable.job.retries;
        const settlement = settle({
          outcome,
          transaction: attempt.transaction,
          stoppedByShutdown: attempt.stoppedByShutdown(),
          finalAttempt: report.finalAttempt,
          token: claim.token,
          run,
        });
        return await this.carryOut(settlement, attempt, runnable);
      } finally {
        if (runnable.made.length > 0) await this.deliverMade(runnable.made, log);
      }
    } finally {
      this.running.delete(id);
      attempt.release();
    }
  }

  /**
   * Commit a step's held transaction with its result: true when committed, false when refused (a
   * newer attempt holds the run). A result that cannot be stored fails the step for good.
   */
  private async commitHeld(
    held: NonNullable<ReturnType<NonNullable<Runnable['held']>>>,
    attempt: Attempt,
    runnable: Runnable,
  ): Promise<boolean> {
    const { claim, runLog: log } = attempt;
    try {
      const committed = await ledgerCall(`commit of step run ${claim.runId}`, () => held.commit(attempt.returned));
      if (!committed) log().warn('step returned, but a newer attempt owns the run: rolled back');
      return committed;
    } catch (err) {
      if (!(err instanceof InvalidArgumentError)) throw err;
      await ledgerCall(`record the failure of run ${claim.runId}`, () => runnable.fail(err));
      log().error({ err }, 'step failed: its result cannot be stored');
      throw err;
    }
  }

  /** The workflow ledger: a step run claimed here without one is a wiring mistake. */
  private workflows(): WorkerWorkflowLedger {
    if (!this.o.workflows)
      throw new InvalidArgumentError('a workflow step was claimed, but the executor has no workflow ledger');
    return this.o.workflows;
  }

  /** A workflow run's own claim: start it, and hand its first steps to the queue. */
  private async startWorkflow(claim: Claim, workflow: WorkflowDefinition, log: RunLog): Promise<ExecutionResult> {
    try {
      const made = await this.retryWhileUnavailable(`start of workflow run ${claim.runId}`, () =>
        startWorkflowRun(this.workflows(), claim, workflow.graph, log()),
      );
      await this.deliverMade(made, log);
      return result('started', claim);
    } catch (err) {
      if (!(err instanceof StaleTokenError)) throw err;
      log().warn({ err }, 'workflow run start is stale: a newer attempt owns it');
      return result('stale', claim);
    }
  }

  /**
   * Hand step runs made ready to the queue. Should that fail (Redis down), they are pending in the
   * ledger and not marked handed over: the leader's outbox hands them over.
   */
  private async deliverMade(made: readonly ReadyStepRun[], log: RunLog): Promise<void> {
    if (made.length === 0 || !this.o.deliverSteps) return;
    await this.o.deliverSteps(made).catch((err: Error) => {
      log().warn({ err, runs: made.length }, 'could not hand the steps made ready to the queue; the outbox will');
    });
  }

  /** Record the settlement in the ledger; rethrows the handler's error where the queue must know. */
  private async carryOut(s: Settlement, attempt: Attempt, runnable: Runnable): Promise<ExecutionResult> {
    const { claim, runLog: log } = attempt;
    switch (s.kind) {
      case 'settled':
        if (s.handlerFailedAfterCommit)
          log().error('handler failed after its transaction committed; the run stays completed');
        return result(s.status, claim);
      case 'complete': {
        // The handler ran: try hard to record that, rather than have the run delivered and run again.
        let accepted: boolean;
        try {
          accepted = await this.retryWhileUnavailable(`record the outcome of run ${claim.runId}`, () =>
            runnable.complete(attempt.returned),
          );
        } catch (err) {
          // A result that cannot be stored (not JSON, too large): the step fails for good, with the reason.
          if (!(err instanceof InvalidArgumentError)) throw err;
          await ledgerCall(`record the failure of run ${claim.runId}`, () => runnable.fail(err));
          log().error({ err }, 'run failed: its result cannot be stored');
          throw err;
        }
        if (accepted) return result('completed', claim);
        log().warn('completed, but a newer attempt owns the run: outcome not recorded');
        return result('stale', claim);
      }
      case 'supersede': {
        const accepted = await ledgerCall(`record run ${claim.runId} superseded`, () =>
          this.o.ledger.finish(claim, 'superseded', s.error),
        );
        if (!accepted) return result('stale', claim);
        log().info({ reason: messageOf(s.error) }, 'run superseded: a later slot already wrote its resource');
        return result('superseded', claim);
      }
      case 'stale':
        await this.o.ledger.finish(claim, 'failed', s.error); // refused, recorded on the attempt as stale
        log().warn({ err: s.error }, 'attempt is stale: a newer attempt owns the run');
        return result('stale', claim);
      case 'interrupt':
        return this.interrupt(claim, log, s.reason);
      case 'unavailable':
        // Nothing of this attempt committed. Say so if the ledger answers by now, and let the
        // worker deliver the run again later.
        await this.o.ledger.finish(claim, 'retrying', `ledger unavailable: ${messageOf(s.error)}`).catch(() => false);
        log().warn({ err: s.error }, 'the ledger is unavailable; the run will be delivered again');
        throw s.error;
      case 'fail': {
        const retryInMs = s.outcome === 'retrying' ? retryDelayMs(runnable.job.backoff, claim.failures + 1) : undefined;
        const accepted = await ledgerCall(`record the failure of run ${claim.runId}`, () =>
          retryInMs === undefined
            ? runnable.fail(s.error)
            : this.o.ledger.finish(claim, s.outcome, s.error, { failure: true, retryInMs }),
        );
        if (accepted && retryInMs !== undefined) await this.redeliver(claim, retryInMs, log);
        log().error({ err: s.error }, s.outcome === 'failed' ? 'run failed' : 'attempt failed; will retry');
        throw s.error;
      }
    }
  }

  /**
   * A run of a job this replica does not define (an older replica during a rolling deploy that
   * added it): record the reason, put the run back to 'retrying' and let the worker hand it back
   * to the queue without using up a retry, so a replica that knows the job runs it.
   */
  private async handBackUnknown(claim: Claim, log: RunLog): Promise<ExecutionResult> {
    const reason = `job "${claim.job}" is not defined on replica ${this.o.replicaId}; handed back for a replica that defines it`;
    const accepted = await ledgerCall(`hand back run ${claim.runId}`, () =>
      this.o.ledger.finish(claim, 'retrying', reason),
    );
    if (accepted) await this.redeliver(claim, handBackDelayMs(claim.attempt - 1 - claim.failures), log);
    log().warn(reason);
    return result('unknown-job', claim);
  }

  /**
   * Record an attempt stopped by this replica's shutdown as interrupted: the run goes back to
   * 'retrying' (not failed, whatever the job's retries), for another replica to claim with a newer
   * token.
   */
  private async interrupt(claim: Claim, log: RunLog, message: string): Promise<ExecutionResult> {
    const accepted = await this.o.ledger.finish(claim, 'retrying', message);
    if (!accepted) {
      const state = await this.o.ledger.runState(claim.runId);
      if (state?.state === 'cancelled') return result('cancelled', claim);
      // The abandoned handler's own transaction committed just before: the run is done.
      if (state?.state === 'completed' && state.claimToken === claim.token) return result('completed', claim);
      log().warn(
        { state: state?.state },
        'interrupted by shutdown, but the run is no longer ours: outcome not recorded',
      );
      return result('stale', claim);
    }
    await this.redeliver(claim, 0, log);
    log().warn({ reason: message }, 'attempt interrupted by shutdown; the run is handed back for another replica');
    return result('interrupted', claim);
  }

  /**
   * Queue the run's next delivery. Should the queue not take it (Redis down), the run is still
   * 'retrying' in the ledger and the leader's delivery sweep hands it over again.
   */
  private async redeliver(claim: Claim, delayMs: number, log: RunLog): Promise<void> {
    await this.o.redeliver?.({ runId: claim.runId, attempt: claim.attempt }, delayMs).catch((err: Error) => {
      log().warn({ err }, 'could not hand the run back to the queue; the delivery sweep will');
    });
  }

  /** ledgerCall, tried again with backoff for about 7 s while PostgreSQL is unavailable. */
  private async retryWhileUnavailable<T>(what: string, fn: () => Promise<T>): Promise<T> {
    for (let delay = 250; ; delay *= 2) {
      try {
        return await ledgerCall(what, fn);
      } catch (err) {
        if (!(err instanceof BackendUnavailableError) || delay > 4000) throw err;
        await this.clock.sleep(delay);
      }
    }
  }
}

function result(status: ExecutionStatus, claim: Claim): ExecutionResult {
  return { status, runId: claim.runId.toString(), attempt: claim.attempt, token: claim.token.toString() };
}
