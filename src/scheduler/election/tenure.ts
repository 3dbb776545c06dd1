import type { Clock, TimerHandle } from '../../clock.js';
import type { LeaseLostError } from '../../errors.js';
import type { Lease } from '../../locks/lease.js';

/** Why a tenure ended: data the elector decides on, not a flag set somewhere in a callback. */
export type TenureEnd =
  /** resign(): released so a follower leads at once; back in the race after pauseMs (default a TTL). */
  | { kind: 'resigned'; pauseMs?: number }
  /** stop(): released, and no more campaigning. */
  | { kind: 'stopped' }
  /** The lease's local deadline passed without a successful renew (a hung or unreachable backend). */
  | { kind: 'deadline' }
  /** The backend refused a renew: expired, or someone else holds the lease. */
  | { kind: 'lost'; error: LeaseLostError }
  /** Something downstream (the fire loop's fence) proved this tenure stale. */
  | { kind: 'fence'; detail: string }
  /** onStartedLeading threw: leading without its work running would be a leader in name only. */
  | { kind: 'callback-failed'; error: Error };

/**
 * The reason as the string the 'lease:lost' event and onStoppedLeading have always carried;
 * metrics class it by prefix ('local deadline', 'fence', 'resigned', 'stopped').
 */
export function describeTenureEnd(end: TenureEnd): string {
  switch (end.kind) {
    case 'resigned':
    case 'stopped':
      return end.kind;
    case 'deadline':
      return 'local deadline passed without a successful renew';
    case 'lost':
      return end.error.message;
    case 'fence':
      return end.detail;
    case 'callback-failed':
      return `onStartedLeading failed: ${end.error.message}`;
  }
}

/**
 * Whether the backend may still think we hold the lease, so releasing it lets a follower lead
 * without waiting out the TTL. Not after a lost lease or a missed deadline: it is not ours.
 */
export function mayStillHold(end: TenureEnd): boolean {
  switch (end.kind) {
    case 'lost':
    case 'deadline':
      return false;
    case 'resigned':
    case 'stopped':
    case 'fence':
    case 'callback-failed':
      return true;
  }
}

/** One term of leadership as a value: the lease as last renewed and when the term began. */
export class LeaderTerm {
  constructor(
    readonly lease: Lease,
    /** Wall-clock ms when the term began. */
    readonly startedAt: number,
  ) {}

  /** Monotonic ms left before the local deadline (≤ 0 once it has passed). */
  remaining(monotonicNow: number): number {
    return this.lease.deadline - monotonicNow;
  }

  renewed(lease: Lease): LeaderTerm {
    return new LeaderTerm(lease, this.startedAt);
  }
}

/**
 * A tenure in progress: its term, a timer at the term's local deadline, and how it ended. The
 * first end() wins; `ended` resolves with it and `signal` aborts with it.
 */
export class Tenure {
  private current: LeaderTerm;
  private endValue: TenureEnd | undefined;
  private deadlineTimer: TimerHandle | undefined;
  private readonly aborter = new AbortController();
  private settle: (end: TenureEnd) => void = () => {};
  readonly ended = new Promise<TenureEnd>((resolve) => (this.settle = resolve));

  constructor(
    term: LeaderTerm,
    private readonly clock: Clock,
  ) {
    this.current = term;
    this.armDeadline();
  }

  get term(): LeaderTerm {
    return this.current;
  }

  get over(): boolean {
    return this.endValue !== undefined;
  }

  /** Aborts (with the TenureEnd as reason) when the tenure ends. */
  get signal(): AbortSignal {
    return this.aborter.signal;
  }

  renewed(lease: Lease): void {
    if (this.over) return;
    this.current = this.current.renewed(lease);
    this.armDeadline();
  }

  end(end: TenureEnd): void {
    if (this.over) return;
    this.endValue = end;
    this.deadlineTimer?.cancel();
    this.aborter.abort(end);
    this.settle(end);
  }

  private armDeadline(): void {
    this.deadlineTimer?.cancel();
    this.deadlineTimer = this.clock.setTimer(
      () => this.end({ kind: 'deadline' }),
      this.current.remaining(this.clock.monotonic()),
    );
  }
}
