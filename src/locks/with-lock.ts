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
export async function withLock<T>(backend: LeaseBackend, options: WithLockOptions, fn: (ctx: LockContext) => Promise<T>): Promise<T>;
export async function withLock<T>(
  backend: LeaseBackend,
  options: WithLockOptions,
  fn: (ctx: LockContext) => Promise<T>,
): Promise<T | undefined> {
  const clock = options.clock ?? systemClock;
  const request = {
    name: options.name,
    holder: options.holder ?? `lock-${process.pid}-${Math.random().toString(36).slice(2, 10)}`,
    ttlMs: options.ttlMs,
    safetyMarginMs: options.safetyMarginMs,
  };
  let lease: Lease | null =
    options.wait === false ? await backend.tryAcquire(request) : await backend.acquire(request, options.signal);
  if (!lease) return undefined;
  const renewEvery = options.renewEveryMs ?? Math.floor(lease.ttlMs / 3);
  if (renewEvery <= 0 || renewEvery >= lease.ttlMs - lease.safetyMarginMs) {
    await backend.release(lease);
    throw new InvalidArgumentError(
      `renewEveryMs (${renewEvery}) must be above 0 and below ttlMs - safetyMarginMs (${lease.ttlMs - lease.safetyMarginMs})`,
    );
  }

  const controller = new AbortController();
  let lost: LeaseLostError | undefined;
  const loseLease = (reason: string) => {
    if (controller.signal.aborted) return;
    lost = new LeaseLostError(request.name, reason);
    controller.abort(lost);
  };
  const onCallerAbort = () => controller.abort(options.signal?.reason);
  options.signal?.addEventListener('abort', onCallerAbort, { once: true });

  let deadlineTimer: TimerHandle | undefined;
  const armDeadline = (l: Lease) => {
    deadlineTimer?.cancel();
    deadlineTimer = clock.setTimer(() => loseLease('local deadline passed before a renew succeeded'), l.deadline - clock.monotonic());
  };
  armDeadline(lease);

  let stopped = false;
  let renewTimer: TimerHandle | undefined;
  const scheduleRenew = () => {
    renewTimer = clock.setTimer(() => void renewOnce(), renewEvery);
  };
  const renewOnce = async () => {
      if (stopped || !lease) return;
      try {
        const renewed = await backend.renew(lease);
        if (stopped || controller.signal.aborted) return;
        lease = renewed;
        armDeadline(renewed);
      } catch (err) {
        if (err instanceof LeaseLostError) return loseLease(err.message);
        // A backend blip: keep trying; the deadline timer decides when it is too late.
      }
      if (!stopped && !controller.signal.aborted) scheduleRenew();
  };
  scheduleRenew();

  try {
    const result = await fn({ token: lease.token, signal: controller.signal });
    if (lost) throw lost;
    return result;
  } finally {
    stopped = true;
    renewTimer?.cancel();
    deadlineTimer?.cancel();
    options.signal?.removeEventListener('abort', onCallerAbort);
    if (!lost) await releaseHeld(backend, lease);
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
