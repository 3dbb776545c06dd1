/**
 * How an attempt settles, decided from what happened and nothing else: a pure function, so every
 * row of the table below has a unit test. RunExecutor carries the decision out on the ledger.
 */
import { BackendUnavailableError, StaleTokenError, SupersededError } from '../errors.js';
import type { HandlerOutcome, TransactionMark } from './attempt.js';

/** The ledger error of an attempt stopped because its replica is shutting down. */
export const INTERRUPTED = 'interrupted: replica shutting down';

export type Settlement =
  /** Nothing left to record: ctx.transaction already did, or the run is settled by someone else. */
  | { kind: 'settled'; status: 'completed' | 'skipped' | 'cancelled'; handlerFailedAfterCommit?: boolean }
  /** The handler ran to the end without ctx.transaction: record the completion. */
  | { kind: 'complete' }
  /** A later slot of the fenced resource already wrote: settle the run without its effect. */
  | { kind: 'supersede'; error: unknown }
  /** A newer attempt owns the run: record this attempt as stale, leave the run alone. */
  | { kind: 'stale'; error: unknown }
  /** The replica's shutdown stopped it: hand the run back without using up a retry. */
  | { kind: 'interrupt'; reason: string }
  /** The ledger could not be reached: nothing committed; deliver the run again later. */
  | { kind: 'unavailable'; error: unknown }
  /** The handler failed: retry (if attempts remain) or fail the run. */
  | { kind: 'fail'; outcome: 'failed' | 'retrying'; error: unknown };

export interface AttemptFacts {
  outcome: HandlerOutcome;
  transaction: TransactionMark;
  /** The replica's shutdown, not a newer claim, a cancel or a timeout, stopped the handler. */
  stoppedByShutdown: boolean;
  /** No retry follows a failure of this attempt. */
  finalAttempt: boolean;
  /** This attempt's execution token. */
  token: bigint;
  /** The run as the ledger has it after the handler threw (see needsRunState). */
  run?: { state: string; claimToken: bigint | null } | null;
}

/** Whether settle() needs the run's current state: the handler threw and nothing committed. */
export function needsRunState(outcome: HandlerOutcome, transaction: TransactionMark): boolean {
  return outcome.kind === 'threw' && transaction !== 'committed' && !(outcome.error instanceof BackendUnavailableError);
}

export function settle(f: AttemptFacts): Settlement {
  if (f.outcome.kind === 'abandoned') {
    if (f.transaction === 'committed') return { kind: 'settled', status: 'completed' };
    if (f.transaction === 'skipped') return { kind: 'settled', status: 'skipped' };
    return {
      kind: 'interrupt',
      reason: `${INTERRUPTED}; the handler did not stop when its signal was aborted and was abandoned`,
    };
  }
  if (f.outcome.kind === 'returned') {
    if (f.transaction === 'committed') return { kind: 'settled', status: 'completed' };
    if (f.transaction === 'skipped') return { kind: 'settled', status: 'skipped' };
    return { kind: 'complete' };
  }
  return settleThrown(f, f.outcome.error);
}

function settleThrown(f: AttemptFacts, error: unknown): Settlement {
  // The effect and the completion committed together; an error after that changes nothing.
  if (f.transaction === 'committed') return { kind: 'settled', status: 'completed', handlerFailedAfterCommit: true };
  if (error instanceof BackendUnavailableError) return { kind: 'unavailable', error };
  if (f.run?.state === 'cancelled') return { kind: 'settled', status: 'cancelled' };
  if (f.transaction === 'skipped') return { kind: 'settled', status: 'skipped' };
  if (isSuperseded(error)) return { kind: 'supersede', error };
  if (error instanceof StaleTokenError || (f.run && f.run.claimToken !== f.token)) return { kind: 'stale', error };
  if (f.stoppedByShutdown) return { kind: 'interrupt', reason: `${INTERRUPTED} (${messageOf(error)})` };
  return { kind: 'fail', outcome: f.finalAttempt ? 'failed' : 'retrying', error };
}

/** SupersededError, also from another copy of this package (a bundled or duplicated install). */
function isSuperseded(error: unknown): boolean {
  return error instanceof SupersededError || (error instanceof Error && error.name === 'SupersededError');
}

export function messageOf(error: unknown): string {
  return error instanceof Error ? error.message : String(error);
}
