import type { Logger } from 'pino';
import type { Claim } from '../ledger/run-ledger.js';

/** A claimed run's logger, made on first call. */
export type RunLog = () => Logger;

/**
 * A claimed run's logger (bound to its id, job, attempt and token), made on first use: most runs
 * log nothing of their own, and pino's child() formats its bindings at once (about 1 KB and a few
 * µs a run, at thousands of runs a second).
 */
export function runLogger(parent: Logger, claim: Claim): RunLog {
  let made: Logger | undefined;
  return () =>
    (made ??= parent.child({
      runId: claim.runId.toString(),
      job: claim.job,
      attempt: claim.attempt,
      token: claim.token.toString(),
    }));
}
