import { systemClock, type Clock, type TimerHandle } from '../clock.js';
import { InvalidArgumentError, LeaseLostError, NotHolderError } from '../errors.js';
import type { Lease, LeaseBackend } from './lease.js';

export interface WithLockOptions {
  name: string;
  /** Defaults to a per-call random id: two withLock calls in one process exclude each other. */
  holder?: string;
  ttlMs: number;
  safetyMarginMs?: number;
  /** Renew this often; default a third of the TTL. Must be shorter than the TTL minus the margin. */
  renewEveryMs?: number;
  /** false: give up at once (return undefined) if the lock is held. Default true: wait. */
  wait?: boolean;
  /** Aborts the wait (and, once held, the critical section). */
  signal?: AbortSignal;
  clock?: Clock;
}

export interface LockContext {
  /** Fencing token of this tenure: pass it with every write the lock protects. */
  readonly token: bigint;
  /** Aborts when the lease is lost (or the caller's signal aborts): stop writing at once. */
  readonly signal: AbortSignal;
}

/**
 * Run fn while holding the lease, renewing it in the background (a watchdog) and releasing it on
 * return or throw. If the lease is lost while fn runs, ctx.signal aborts at the local deadline even
 * when the backend never answers, and withLock rejects with LeaseLostError after fn settles: the
 * section was not exclusive to the end, and the caller must know.
 */
export async function withLock<T>(
  backend: LeaseBackend,
  options: WithLockOptions & { wait: false },
  fn: (ctx: LockContext) => Promise<T>,
): Promise<T | undefined>;
export async function withLock<T>(
  backend: LeaseBackend,
  options: WithLockOptions,
  fn: (ctx: LockContext) => Promise<T>,
): Promise<T>;
export async function withLock<T>(
  backend: LeaseBackend,
  options: WithLockOptions,
  fn: (ctx: LockContext) => Promise<T>,
): Promise<T | undefined> {
  const request = {
    name: options.name,
    holder: options.holder ?? `lock-${process.pid}-${Math.random().toString(36).slice(2, 10)}`,
    ttlMs: options.ttlMs,
    safetyMarginMs: options.safetyMarginMs,
  };
  const lease: Lease | null =
    options.wait === false ? await backend.tryAcquire(request) : await backend.acquire(request, options.signal);
  if (!lease) return undefined;
  const renewEvery = await checkedRenewInterval(backend, lease, options.renewEveryMs);
  const watchdog = new Watchdog(backend, lease, request.name, renewEvery, options.clock ?? systemClock, options.signal);

  try {
    const result = await fn({ token: lease.token, signal: watchdog.signal });
    if (watchdog.lost) throw watchdog.lost;
    return result;
  } finally {
    watchdog.stop();
    if (!watchdog.lost) await releaseHeld(backend, watchdog.lease);
  }
}

/**
 * The renew interval (default a third of the TTL); one that could not renew before the local
 * deadline releases the fresh lease and throws, so a bad option never leaves the lock held.
 */
async function checkedRenewInterval(
  backend: LeaseBackend,
  lease: Lease,
  renewEveryMs: number | undefined,
): Promise<number> {
  const renewEvery = renewEveryMs ?? Math.floor(lease.ttlMs / 3);
  if (renewEvery <= 0 || renewEvery >= lease.ttlMs - lease.safetyMarginMs) {
    await backend.release(lease);
    throw new InvalidArgumentError(
      `renewEveryMs (${renewEvery}) must be above 0 and below ttlMs - safetyMarginMs (${lease.ttlMs - lease.safetyMarginMs})`,
    );
  }
  return renewEvery;
}

/**
 * Renews a held lease in the background and aborts `signal` when it is lost: at the local
 * deadline (a timer, so a backend that never answers still ends the section), on a LeaseLostError
 * from renew, or when the caller's signal aborts.
 */
class Watchdog {
  /** The latest lease (renewals replace it); the one to release. */
  lease: Lease;
  /** Set when the lease was lost (not when the caller aborted). */
  lost: LeaseLostError | undefined;
  private readonly controller = new AbortController();
  private stopped = false;
  private deadlineTimer: TimerHandle | undefined;
  private renewTimer: TimerHandle | undefined;

  constructor(
    private readonly backend: LeaseBackend,
    lease: Lease,
    private readonly name: string,
    private readonly renewEvery: number,
    private readonly clock: Clock,
    private readonly callerSignal: AbortSignal | undefined,
  ) {
    this.lease = lease;
    callerSignal?.addEventListener('abort', this.onCallerAbort, { once: true });
    this.armDeadline(lease);
    this.scheduleRenew();
  }

  get signal(): AbortSignal {
    return this.controller.signal;
  }

  /** Stops renewing and watching; the caller releases (or not) the lease. */
  stop(): void {
    this.stopped = true;
    this.renewTimer?.cancel();
    this.deadlineTimer?.cancel();
    this.callerSignal?.removeEventListener('abort', this.onCallerAbort);
  }

  private readonly onCallerAbort = () => this.controller.abort(this.callerSignal?.reason);

  private loseLease(reason: string): void {
    if (this.controller.signal.aborted) return;
    this.lost = new LeaseLostError(this.name, reason);
    this.controller.abort(this.lost);
  }

  private armDeadline(l: Lease): void {
    this.deadlineTimer?.cancel();
    this.deadlineTimer = this.clock.setTimer(
      () => this.loseLease('local deadline passed before a renew succeeded'),
      l.deadline - this.clock.monotonic(),
    );
  }

  private scheduleRenew(): void {
    this.renewTimer = this.clock.setTimer(() => void this.renewOnce(), this.renewEvery);
  }

  private async renewOnce(): Promise<void> {
    if (this.stopped) return;
    try {
      const renewed = await this.backend.renew(this.lease);
      if (this.stopped || this.controller.signal.aborted) return;
      this.lease = renewed;
      this.armDeadline(renewed);
    } catch (err) {
      if (err instanceof LeaseLostError) return this.loseLease(err.message);
      // A backend blip: keep trying; the deadline timer decides when it is too late.
    }
    if (!this.stopped && !this.controller.signal.aborted) this.scheduleRenew();
  }
}

/** Release a lease we still believe we hold; someone else holding it by now is not an error. */
async function releaseHeld(backend: LeaseBackend, lease: Lease): Promise<void> {
  try {
    await backend.release(lease);
  } catch (err) {
    if (!(err instanceof NotHolderError)) throw err;
  }
}
