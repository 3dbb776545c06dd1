/**
 * The lease contract every backend implements. Small on purpose (client-go's resourcelock is the
 * model): the election loop, the scheduler and withLock are written once against this interface
 * and know nothing of etcd, Redis or SQL.
 */

export type BackendKind = 'etcd' | 'redis' | 'postgres' | 'memory';

export interface LeaseRequest {
  /** Lease name, e.g. "cronwarden/scheduler". */
  readonly name: string;
  /** Who asks: a replica id, stable for the life of the process. */
  readonly holder: string;
  /** How long the backend keeps the lease without a renew. */
  readonly ttlMs: number;
  /**
   * Subtracted from the TTL when computing the local deadline, to cover clock-rate drift and the
   * time between our deadline check and the write it guards. Default: DEFAULT_SAFETY_MARGIN(ttl).
   */
  readonly safetyMarginMs?: number;
}

/** A granted lease as its holder sees it. Immutable: renew returns a new object. */
export interface Lease {
  readonly name: string;
  readonly holder: string;
  /** Fencing token: strictly increasing per lease name across holders, never reused. */
  readonly token: bigint;
  readonly ttlMs: number;
  readonly safetyMarginMs: number;
  /**
   * Monotonic time (Clock.monotonic) after which the holder must behave as if it had lost the
   * lease: measured from when the acquire/renew request was SENT, minus the safety margin.
   */
  readonly deadline: number;
  /** Backend-private state needed to renew or release (etcd lease id and key, …). */
  readonly handle?: string;
}

/** What anyone can read about a lease. */
export interface LeaseRecord {
  readonly name: string;
  readonly holder: string;
  readonly token: bigint;
  /** Milliseconds until the backend expires the lease, by the backend's own clock. */
  readonly expiresInMs: number;
}

export type Unsubscribe = () => Promise<void>;

export interface LeaseBackend {
  readonly kind: BackendKind;

  /** Take the lease if it is free (or already ours); null if someone else holds it. */
  tryAcquire(request: LeaseRequest): Promise<Lease | null>;

  /**
   * Wait until the lease is ours. Wakes on the backend's change notification, not by polling.
   * Rejects with AbortedError when the signal aborts.
   */
  acquire(request: LeaseRequest, signal?: AbortSignal): Promise<Lease>;

  /** Extend the lease. Rejects with LeaseLostError if it expired or changed hands. */
  renew(lease: Lease): Promise<Lease>;

  /** Give the lease up so a waiter takes over at once. Rejects with NotHolderError if not ours. */
  release(lease: Lease): Promise<void>;

  /** Who holds the lease now, or null if nobody does. */
  current(name: string): Promise<LeaseRecord | null>;

  /**
   * Call listener whenever the lease may have changed hands (released, expired, taken). Listeners
   * must re-read: a notification says "look", not what happened.
   */
  onChange(name: string, listener: () => void): Promise<Unsubscribe>;

  /**
   * Make sure every token granted from now on is greater than `floor`. Redis raises its counter
   * (needed after a restart without persistence); PostgreSQL raises the row's counter; etcd, whose
   * tokens are cluster revisions, throws InvalidArgumentError if its revision is already below it.
   */
  ensureTokenAbove(name: string, floor: bigint): Promise<void>;

  /** Close connections this backend opened itself. Idempotent. */
  close(): Promise<void>;
}
