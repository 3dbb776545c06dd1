import type { Logger } from 'pino';
import { StaleTokenError } from '../errors.js';
import type { Claim, Ledger } from '../scheduler/ledger.js';
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
  | 'cancelled';

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

export interface RunExecutorOptions {
  ledger: Ledger;
  registry: JobRegistry;
  replicaId: string;
  logger: Logger;
  /** Tell the other replicas a run was claimed, so an older attempt aborts. */
  publish?: (message: ControlMessage) => Promise<void>;
}

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
   * failed (so the queue retries it or marks it failed). `finalAttempt`: no retry will follow.
   */
  async execute(runId: bigint, options: { finalAttempt: boolean; signal?: AbortSignal }): Promise<ExecutionResult> {
    const claimed = await this.o.ledger.claim(runId, this.o.replicaId);
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
    if (job.timeoutMs > 0) signals.push(AbortSignal.timeout(job.timeoutMs));
    const signal = AbortSignal.any(signals);
    let completedInTransaction = false;
    let skippedInTransaction = false;
    const ctx: JobContext = {
      jobName: claim.job,
      scheduledAt: claim.scheduledAt,
      runId: runId.toString(),
      attempt: claim.attempt,
      fencingToken: claim.token,
      idempotencyKey: idempotencyKey(claim),
      signal,
      logger: log,
      fence: (resource, tx) => this.o.ledger.fenceRun(resource, claim, tx),
      transaction: async (fn) => {
        const result = await this.o.ledger.completeInTransaction(claim, fn);
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
      await job.handler(ctx);
      if (skippedInTransaction) return { status: 'skipped', runId: ctx.runId, attempt: claim.attempt };
      if (completedInTransaction) return result('completed', claim);
      const accepted = await this.o.ledger.finish(claim, 'completed');
      if (!accepted) {
        log.warn('completed, but a newer attempt owns the run: outcome not recorded');
        return result('stale', claim);
      }
      return result('completed', claim);
    } catch (err) {
      const message = (err as Error)?.message ?? String(err);
      const state = await this.o.ledger.runState(runId);
      if (state?.state === 'cancelled') return result('cancelled', claim);
      if (skippedInTransaction) return { status: 'skipped', runId: ctx.runId, attempt: claim.attempt };
      if (err instanceof StaleTokenError || (state && state.claimToken !== claim.token)) {
        await this.o.ledger.finish(claim, 'failed', message); // refused, recorded on the attempt as stale
        log.warn({ err }, 'attempt is stale: a newer attempt owns the run');
        return result('stale', claim);
      }
      await this.o.ledger.finish(claim, options.finalAttempt ? 'failed' : 'retrying', message);
      log.error({ err }, options.finalAttempt ? 'run failed' : 'attempt failed; will retry');
      throw err;
    } finally {
      this.running.delete(runId.toString());
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
