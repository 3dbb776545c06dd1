import type { Logger } from 'pino';
import { AbortedError, BackendUnavailableError, InvalidArgumentError, StaleTokenError } from '../errors.js';
import { isPostgresUnavailable } from '../db/postgres-unavailable.js';
import type { Claim, RunLedger } from '../ledger/run-ledger.js';
import type { JobContext } from './job-context.js';
import type { JobRegistry } from './job-registry.js';

export type ExecutionStatus =
  /** The handler finished and the run is recorded completed by this attempt. */
  | 'completed'
  /** The run was already finished (a re-delivery after the work was done): nothing ran. */
  | 'skipped'
  /** A newer attempt took the run over while this one ran; its outcome was not recorded. */
  | 'stale'
  /** The leader cancelled the run (overlap 'replace'). */
  | 'cancelled'
  /**
   * This replica is shutting down: the attempt was recorded as interrupted (ledger state
   * 'retrying') and the run must be handed back to the queue for another replica, without
   * counting as one of the job's retries.
   */
  | 'interrupted';

export interface ExecutionResult {
  status: ExecutionStatus;
  runId: string;
  attempt?: number;
  token?: string;
}

/** Messages on the control channel shared by all replicas. */
export type ControlMessage =
  | { type: 'claimed'; runId: string; token: string }
  | { type: 'cancel'; runIds: string[] };

/** The ledger operations an attempt uses: a seam, so unit tests can pass an in-memory ledger. */
export type ExecutorLedger = Pick<RunLedger, 'claim' | 'fenceRun' | 'completeInTransaction' | 'finish' | 'runState'>;

export interface RunExecutorOptions {
  ledger: ExecutorLedger;
  registry: JobRegistry;
  replicaId: string;
  logger: Logger;
  /** Tell the other replicas a run was claimed, so an older attempt aborts. */
  publish?: (message: ControlMessage) => Promise<void>;
}

export interface ExecuteOptions {
  /** No retry will follow a failure of this attempt. */
  finalAttempt: boolean;
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
}

/** The ledger error of an attempt stopped because its replica is shutting down. */
export const INTERRUPTED = 'interrupted: replica shutting down';

const ABANDONED = Symbol('abandoned');

interface Running {
  token: bigint;
  abort: AbortController;
}

/**
 * Runs one delivery of one run: claim it in the ledger (getting an execution token), hand the
 * handler its context, record the outcome. Knows nothing of BullMQ; bullmq-worker.ts feeds it.
 */
export class RunExecutor {
  private readonly running = new Map<string, Running>();

  constructor(private readonly o: RunExecutorOptions) {}

  /** Set how claims are announced (the worker's Redis publisher, once it exists). */
  setPublisher(publish: (message: ControlMessage) => Promise<void>): void {
    this.o.publish = publish;
  }

  /** React to another replica's claim or a cancel: abort the attempts it makes stale. */
  onControl(message: ControlMessage): void {
    if (message.type === 'claimed') {
      const mine = this.running.get(message.runId);
      if (mine && mine.token < BigInt(message.token)) {
        mine.abort.abort(new StaleTokenError(`run ${message.runId}`, mine.token, BigInt(message.token)));
      }
    } else {
      for (const id of message.runIds) this.running.get(id)?.abort.abort(new Error(`run ${id} cancelled`));
    }
  }

  /**
   * Execute one delivery. Resolves with the status; rejects with the handler's error when it
   * failed (so the queue retries it or marks it failed). An attempt stopped by the replica's
   * shutdown (options.signal, options.abandon) resolves 'interrupted' instead: the caller hands
   * the run back to the queue.
   */
  async execute(runId: bigint, options: ExecuteOptions): Promise<ExecutionResult> {
    if (options.signal?.aborted) {
      // Delivered while this replica is already shutting down: do not even claim it.
      return { status: 'interrupted', runId: runId.toString() };
    }
    // The ledger unreachable: nothing ran, so the delivery is simply tried again later (the worker
    // delays it without using up an attempt); a failed BullMQ job would strand the run 'pending'.
    const claimed = await ledgerCall(`claim of run ${runId}`, () => this.o.ledger.claim(runId, this.o.replicaId));
    if (claimed.status === 'finished') {
      this.o.logger.info({ runId: runId.toString(), state: claimed.state }, 'delivery skipped: run already finished');
      return { status: 'skipped', runId: runId.toString() };
    }
    const claim = claimed.claim;
    const job = this.o.registry.get(claim.job);
    const log = this.o.logger.child({ runId: runId.toString(), job: claim.job, attempt: claim.attempt, token: claim.token.toString() });
    if (!job) {
      await this.o.ledger.finish(claim, 'failed', `job "${claim.job}" is not defined on replica ${this.o.replicaId}`);
      throw new Error(`job "${claim.job}" is not defined on this replica`);
    }
    await this.o.publish?.({ type: 'claimed', runId: runId.toString(), token: claim.token.toString() }).catch((err: Error) => {
      log.warn({ err }, 'could not announce the claim');
    });

    const abort = new AbortController();
    this.running.set(runId.toString(), { token: claim.token, abort });
    const signals = [abort.signal];
    if (options.signal) signals.push(options.signal);
    const timeout = job.timeoutMs > 0 ? AbortSignal.timeout(job.timeoutMs) : undefined;
    if (timeout) signals.push(timeout);
    const signal = AbortSignal.any(signals);
    /** The replica's shutdown, not a newer claim, a cancel or the job's timeout, stopped it. */
    const stoppedByShutdown = () => options.signal?.aborted === true && !abort.signal.aborted && !timeout?.aborted;
    let transactionCalled = false;
    let completedInTransaction = false;
    let skippedInTransaction = false;
    let abandoned = false;
    const refuseIfAbandoned = () => {
      if (abandoned) throw new AbortedError(`attempt ${claim.attempt} of run ${claim.runId} (abandoned on shutdown)`);
    };
    const ctx: JobContext = {
      jobName: claim.job,
      scheduledAt: claim.scheduledAt,
      runId: runId.toString(),
      attempt: claim.attempt,
      fencingToken: claim.token,
      idempotencyKey: idempotencyKey(claim),
      signal,
      logger: log,
      fence: async (resource, tx) => {
        refuseIfAbandoned();
        await ledgerCall(`ctx.fence of run ${claim.runId}`, () => this.o.ledger.fenceRun(resource, claim, tx));
      },
      transaction: async (fn) => {
        // The completion record belongs to the one transaction of the attempt: a second call
        // would find the run completed (by this very attempt) and record it as skipped.
        if (transactionCalled) {
          throw new InvalidArgumentError(
            `ctx.transaction may be called once per attempt (run ${claim.runId}, attempt ${claim.attempt}): put all of the run's writes in one call`,
          );
        }
        transactionCalled = true;
        refuseIfAbandoned();
        const result = await ledgerCall(`ctx.transaction of run ${claim.runId}`, () => this.o.ledger.completeInTransaction(claim, fn));
        if (result.status === 'skipped') {
          skippedInTransaction = true;
          log.info('transaction skipped: an earlier attempt already completed this run');
          return undefined;
        }
        completedInTransaction = true;
        return result.value;
      },
    };

    try {
      const outcome = await untilAbandoned(Promise.resolve().then(() => job.handler(ctx)), options.abandon, (err) => {
        log.warn({ err }, 'abandoned handler finished late');
      });
      if (outcome === ABANDONED) {
        abandoned = true;
        if (completedInTransaction) return result('completed', claim);
        if (skippedInTransaction) return { status: 'skipped', runId: ctx.runId, attempt: claim.attempt };
        return await this.interrupt(claim, log, `${INTERRUPTED}; the handler did not stop when its signal was aborted and was abandoned`);
      }
      if (skippedInTransaction) return { status: 'skipped', runId: ctx.runId, attempt: claim.attempt };
      if (completedInTransaction) return result('completed', claim);
      // The handler ran: try hard to record that, rather than have the run delivered and run again.
      const accepted = await retryWhileUnavailable(`record the outcome of run ${claim.runId}`, () => this.o.ledger.finish(claim, 'completed'));
      if (!accepted) {
        log.warn('completed, but a newer attempt owns the run: outcome not recorded');
        return result('stale', claim);
      }
      return result('completed', claim);
    } catch (err) {
      const message = (err as Error)?.message ?? String(err);
      if (err instanceof BackendUnavailableError && !completedInTransaction) {
        // The ledger could not be reached (claim aside): nothing of this attempt committed. Say so
        // if the ledger answers by now, and let the worker deliver the run again later.
        await this.o.ledger.finish(claim, 'retrying', `ledger unavailable: ${message}`).catch(() => false);
        log.warn({ err }, 'the ledger is unavailable; the run will be delivered again');
        throw err;
      }
      if (completedInTransaction) {
        // The run's effect and completion committed; an error after that changes nothing, and a
        // retry would only be skipped. Keep the completed record as it is.
        log.error({ err }, 'handler failed after its transaction committed; the run stays completed');
        return result('completed', claim);
      }
      const state = await ledgerCall(`read the state of run ${runId}`, () => this.o.ledger.runState(runId));
      if (state?.state === 'cancelled') return result('cancelled', claim);
      if (skippedInTransaction) return { status: 'skipped', runId: ctx.runId, attempt: claim.attempt };
      if (err instanceof StaleTokenError || (state && state.claimToken !== claim.token)) {
        await this.o.ledger.finish(claim, 'failed', message); // refused, recorded on the attempt as stale
        log.warn({ err }, 'attempt is stale: a newer attempt owns the run');
        return result('stale', claim);
      }
      if (stoppedByShutdown()) return await this.interrupt(claim, log, `${INTERRUPTED} (${message})`);
      await ledgerCall(`record the failure of run ${runId}`, () => this.o.ledger.finish(claim, options.finalAttempt ? 'failed' : 'retrying', message));
      log.error({ err }, options.finalAttempt ? 'run failed' : 'attempt failed; will retry');
      throw err;
    } finally {
      this.running.delete(runId.toString());
    }
  }

  /**
   * Record an attempt stopped by this replica's shutdown as interrupted: the run goes back to
   * 'retrying' (not failed, whatever the job's retries), for another replica to claim with a newer
   * token.
   */
  private async interrupt(claim: Claim, log: Logger, message: string): Promise<ExecutionResult> {
    const accepted = await this.o.ledger.finish(claim, 'retrying', message);
    if (!accepted) {
      const state = await this.o.ledger.runState(claim.runId);
      if (state?.state === 'cancelled') return result('cancelled', claim);
      // The abandoned handler's own transaction committed just before: the run is done.
      if (state?.state === 'completed' && state.claimToken === claim.token) return result('completed', claim);
      log.warn({ state: state?.state }, 'interrupted by shutdown, but the run is no longer ours: outcome not recorded');
      return result('stale', claim);
    }
    log.warn({ reason: message }, 'attempt interrupted by shutdown; the run is handed back for another replica');
    return result('interrupted', claim);
  }
}

/**
 * The handler's outcome, or ABANDONED once `abandon` aborts first. An abandoned handler keeps
 * running on its own; its eventual rejection goes to `late` instead of becoming unhandled.
 */
async function untilAbandoned<T>(work: Promise<T>, abandon: AbortSignal | undefined, late: (err: unknown) => void): Promise<T | typeof ABANDONED> {
  if (!abandon) return work;
  let onAbort = () => {};
  const abandoned = new Promise<typeof ABANDONED>((resolve) => {
    onAbort = () => resolve(ABANDONED);
    if (abandon.aborted) onAbort();
    else abandon.addEventListener('abort', onAbort, { once: true });
  });
  try {
    const outcome = await Promise.race([work, abandoned]);
    if (outcome === ABANDONED) work.catch(late);
    return outcome;
  } finally {
    abandon.removeEventListener('abort', onAbort);
  }
}

/** Run a ledger operation; PostgreSQL being unreachable becomes BackendUnavailableError (retryable). */
async function ledgerCall<T>(what: string, fn: () => Promise<T>): Promise<T> {
  try {
    return await fn();
  } catch (err) {
    if (err instanceof BackendUnavailableError || !isPostgresUnavailable(err)) throw err;
    throw new BackendUnavailableError('postgres', `${what}: ${(err as Error).message}`, { cause: err });
  }
}

/** ledgerCall, tried again with backoff for about 7 s while PostgreSQL is unavailable. */
async function retryWhileUnavailable<T>(what: string, fn: () => Promise<T>): Promise<T> {
  for (let delay = 250; ; delay *= 2) {
    try {
      return await ledgerCall(what, fn);
    } catch (err) {
      if (!(err instanceof BackendUnavailableError) || delay > 4000) throw err;
      await new Promise((r) => setTimeout(r, delay));
    }
  }
}

function result(status: ExecutionStatus, claim: Claim): ExecutionResult {
  return { status, runId: claim.runId.toString(), attempt: claim.attempt, token: claim.token.toString() };
}

/** Stable across attempts of one run, unique across runs: job name plus scheduled instant. */
export function idempotencyKey(run: { job: string; scheduledAt: Date }): string {
  return `${run.job}@${run.scheduledAt.toISOString()}`;
}
