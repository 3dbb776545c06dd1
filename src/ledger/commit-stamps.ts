/**
 * Who commits a write of the scheduler's, and the check made just before COMMIT. Fires
 * (fire-commit.ts, stand-in-commit.ts), retries (run-retry.ts) and one-off runs
 * (schedule-ledger.ts) each carry one; the types live here so none of them imports another.
 */

/**
 * The lease TTL's default (replica-defaults.ts), and the ledger's until a replica sets its own
 * (Ledger.useLeaseTtl): how long a worker may stay silent before its claims are taken for dead, and
 * how long a transaction holding the scheduler's fence may sit idle (transaction.ts, fenceHoldLimit).
 */
export const DEFAULT_LEASE_TTL_MS = 10_000;

/** The leader: its fence and token, and whether it still leads. */
export interface LeaderStamp {
  fenceResource: string;
  token: bigint;
  replicaId: string;
  /** False once the leader's local deadline passed: the batch rolls back instead of committing. */
  stillLeading: () => boolean;
}

/** A follower standing in for a silent leader: no lease of its own, so no token to fence with. */
export interface StandInStamp {
  /** The scheduler's fence, whose current token the stand-in's fires carry. */
  fenceResource: string;
  replicaId: string;
}
