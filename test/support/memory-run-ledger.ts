/**
 * An in-memory stand-in for the workers' side of the ledger (ExecutorLedger: claim, fenceRun,
 * completeInTransaction, finish, runState), over the runs and fences of a MemoryLedger, so
 * RunExecutor gets unit tests without PostgreSQL. It keeps the rules of the SQL in
 * src/ledger/run-ledger.ts and src/ledger/fences.ts; test/support/ledger-contract.ts runs the same
 * scenarios on it and on the real Ledger.
 *
 * Written by hand because it models cronwarden's own statements, which no library knows.
 */
import type pg from 'pg';
import { StaleTokenError, SupersededError } from '../../src/errors.js';
import type { ExecutorLedger } from '../../src/jobs/run-executor.js';
import type { FireTrigger } from '../../src/cron/fire-trigger.js';
import type { Claim, ClaimResult, Outcome, TransactionResult } from '../../src/ledger/ledger.js';
import type { FinishDetails } from '../../src/ledger/run-ledger.js';
import { slotOf, slotToken } from '../../src/ledger/slot-token.js';
import { storedError } from '../../src/ledger/stored-text.js';
import { isActive, type MemoryLedger, type MemoryRun } from './memory-ledger.js';

/** A row of cw_run_attempts. */
export interface MemoryAttempt {
  attempt: number;
  token: bigint;
  worker: string;
  state: string;
  error: string | null;
  errorStack: string | null;
}

/** The worker-side columns of a run (cw_runs' claim columns) and its attempts. */
export interface RunBook {
  claimToken: bigint | null;
  claimedBy: string | null;
  attempts: number;
  /** Attempts the handler failed (cw_runs.failures). */
  failures: number;
  skippedAttempts: number;
  completedAttempt: number | null;
  attemptRows: MemoryAttempt[];
}

/** A statement a handler ran on its transaction: applied (visible in `effects`) only on commit. */
export interface MemoryStatement {
  text: string;
  values: unknown[];
}

/**
 * The `tx` a handler gets from ctx.transaction on the memory ledger: it buffers the handler's
 * statements and the fences written through it; the ledger applies both at COMMIT, or drops them.
 */
export class MemoryTransaction {
  readonly statements: MemoryStatement[] = [];
  readonly fences = new Map<string, bigint>();
  private open = true;

  async query(text: string, values: unknown[] = []): Promise<{ rows: never[]; rowCount: number }> {
    if (!this.open) throw new Error('query on a transaction that has already ended');
    this.statements.push({ text, values });
    return { rows: [], rowCount: 1 };
  }

  end(): void {
    this.open = false;
  }
}

export class MemoryRunLedger implements ExecutorLedger {
  /** Every statement of a committed transaction, in commit order (the handlers' effects). */
  readonly effects: MemoryStatement[] = [];
  private readonly books = new Map<bigint, RunBook>();
  /** One counter for every execution token, as cw_execution_token_seq. */
  private lastToken = 0n;

  constructor(readonly fires: MemoryLedger) {}

  async claim(runId: bigint, worker: string): Promise<ClaimResult> {
    const run = this.run(runId);
    if (!run || !isActive(run)) {
      const state = this.recordSkippedDelivery(runId, run, worker);
      return { status: 'finished', state, ...(run && { job: run.job }) };
    }
    const book = this.book(runId);
    const token = this.nextToken();
    // No member rows here: a running run's claimer counts as stopped, as in the SQL without them.
    const tookOverFrom = run.state === 'running' ? (book.claimedBy ?? 'an unknown worker') : undefined;
    for (const row of book.attemptRows.filter((a) => a.state === 'running'))
      Object.assign(row, {
        state: 'stale',
        error:
          tookOverFrom === worker
            ? 'its outcome was never recorded (its worker was started again, or lost the ledger); the run was claimed again'
            : `worker ${tookOverFrom} stopped beating; the run was handed to ${worker}`,
      });
    book.claimToken = token;
    book.claimedBy = worker;
    book.attempts += 1;
    run.state = 'running';
    book.attemptRows.push({ attempt: book.attempts, token, worker, state: 'running', error: null, errorStack: null });
    return {
      status: 'claimed',
      claim: {
        runId,
        job: run.job,
        scheduledAt: run.scheduledAt,
        attempt: book.attempts,
        token,
        trigger: run.trigger as FireTrigger,
        claimedAt: new Date(this.fires.now()),
        failures: book.failures,
        ...(tookOverFrom === undefined ? {} : { tookOverFrom }),
        ...(run.coalesced ? { coalesced: run.coalesced } : {}),
      },
    };
  }

  /** As fences.ts: the newest claim first (StaleTokenError), then slot order (SupersededError / StaleTokenError). */
  async fenceRun(resource: string, claim: Claim, db?: unknown): Promise<void> {
    const tx = db instanceof MemoryTransaction ? db : undefined;
    const newestClaim = this.run(claim.runId) ? this.book(claim.runId).claimToken : null;
    if (newestClaim !== claim.token) throw new StaleTokenError(`run ${claim.runId}`, claim.token, newestClaim);
    const mine = slotToken(claim.scheduledAt, claim.attempt);
    const highest = tx?.fences.get(resource) ?? this.fires.fences.get(resource);
    if (highest === undefined || highest <= mine) {
      (tx?.fences ?? this.fires.fences).set(resource, mine);
      return;
    }
    if (slotOf(highest) > claim.scheduledAt) throw new SupersededError(resource, claim.scheduledAt, slotOf(highest));
    throw new StaleTokenError(resource, mine, highest);
  }

  /**
   * As the SQL: already completed → 'skipped' (fn not called); a newer claim → StaleTokenError;
   * else run fn on a buffering transaction and commit it with the completion only if this attempt
   * still holds the newest claim of an active run when fn returns; otherwise drop the buffer.
   */
  async completeInTransaction<T>(claim: Claim, fn: (tx: pg.PoolClient) => Promise<T>): Promise<TransactionResult<T>> {
    const run = this.run(claim.runId);
    if (!run || run.state === 'completed') {
      this.recordSkippedAttempt(claim, 'run already completed by an earlier attempt');
      return { status: 'skipped' };
    }
    const book = this.book(claim.runId);
    if (book.claimToken !== claim.token) throw new StaleTokenError(`run ${claim.runId}`, claim.token, book.claimToken);
    const tx = new MemoryTransaction();
    let value: T;
    try {
      // Handlers under unit test use tx.query(text, values) only; MemoryTransaction has that much of a pg client.
      value = await fn(tx as unknown as pg.PoolClient);
    } finally {
      tx.end();
    }
    // The completing UPDATE is part of the transaction: refused, it rolls back with the rest.
    if (book.claimToken === claim.token && isActive(run)) {
      this.finishNow(claim, 'completed', undefined);
      this.effects.push(...tx.statements);
      for (const [resource, token] of tx.fences) {
        const highest = this.fires.fences.get(resource);
        if (highest === undefined || highest <= token) this.fires.fences.set(resource, token);
      }
      return { status: 'committed', value };
    }
    if (run.state === 'completed')
      this.recordSkippedAttempt(claim, 'a newer attempt completed the run first; this attempt rolled back');
    throw new StaleTokenError(`run ${claim.runId}`, claim.token, book.claimToken);
  }

  async finish(claim: Claim, outcome: Outcome, error?: unknown, details: FinishDetails = {}): Promise<boolean> {
    const accepted = this.finishNow(claim, outcome, error);
    if (accepted && details.failure) this.book(claim.runId).failures += 1;
    return accepted;
  }

  async runState(runId: bigint): Promise<{ state: string; claimToken: bigint | null } | null> {
    const run = this.run(runId);
    return run ? { state: run.state, claimToken: this.book(runId).claimToken } : null;
  }

  /** The worker-side record of a run (what the admin API would show of its attempts). */
  bookOf(runId: bigint): RunBook | undefined {
    return this.run(runId) ? this.book(runId) : undefined;
  }

  /** Conditional on the newest claim and an active run, as the UPDATE in run-ledger.ts. */
  private finishNow(claim: Claim, outcome: Outcome, error: unknown): boolean {
    const stored = error === undefined ? null : storedError(error);
    const message = stored ? textColumn(stored.message) : null;
    const stack = stored?.stack ? textColumn(stored.stack) : null;
    const run = this.run(claim.runId);
    if (!run) return false;
    const book = this.book(claim.runId);
    const accepted = book.claimToken === claim.token && isActive(run);
    if (accepted) {
      run.state = outcome;
      if (outcome === 'completed') book.completedAttempt = claim.attempt;
      run.error = message ?? undefined;
    }
    const row = book.attemptRows.find((a) => a.attempt === claim.attempt && a.state === 'running');
    if (row) Object.assign(row, { state: accepted ? outcome : 'stale', error: message, errorStack: stack });
    return accepted;
  }

  private recordSkippedAttempt(claim: Claim, reason: string): void {
    if (!this.run(claim.runId)) return;
    const book = this.book(claim.runId);
    const row = book.attemptRows.find((a) => a.attempt === claim.attempt);
    if (row) Object.assign(row, { state: 'skipped', error: reason });
    book.skippedAttempts += 1;
  }

  /** A delivery of a finished run: a skipped attempt numbered after every earlier one. */
  private recordSkippedDelivery(runId: bigint, run: MemoryRun | undefined, worker: string): string {
    if (!run) return 'unknown';
    const book = this.book(runId);
    book.skippedAttempts += 1;
    const attempt = book.attempts + book.skippedAttempts;
    book.attemptRows.push({
      attempt,
      token: this.nextToken(),
      worker,
      state: 'skipped',
      error: `run already ${run.state}`,
      errorStack: null,
    });
    return run.state;
  }

  private nextToken(): bigint {
    this.lastToken += 1n;
    return this.lastToken;
  }

  private run(runId: bigint): MemoryRun | undefined {
    return this.fires.runs.find((r) => r.id === runId);
  }

  private book(runId: bigint): RunBook {
    let book = this.books.get(runId);
    if (!book) {
      book = {
        claimToken: null,
        claimedBy: null,
        attempts: 0,
        failures: 0,
        skippedAttempts: 0,
        completedAttempt: null,
        attemptRows: [],
      };
      this.books.set(runId, book);
    }
    return book;
  }
}

/** PostgreSQL text refuses U+0000 ("invalid byte sequence for encoding UTF8: 0x00"): so does the fake. */
function textColumn(text: string): string {
  if (text.includes('\u0000')) throw new Error('invalid byte sequence for encoding "UTF8": 0x00');
  return text;
}
