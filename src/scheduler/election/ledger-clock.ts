/**
 * The scheduler's wall clock, taken from the ledger's PostgreSQL server instead of the host.
 *
 * A replica whose host clock runs five minutes fast would otherwise fire five minutes of
 * schedules at once the moment it leads, and one running slow would fire nothing until its clock
 * caught up. Every replica reads the same server's clock instead (the one that already decides
 * the postgres lease and stamps every run), so skew or a jump on one host changes nothing.
 *
 * now() = the server's time at the last sync + monotonic time elapsed since, so a jump of the
 * host's wall clock between syncs is invisible too.
 *
 * Never ahead of the server: the server read its clock somewhere inside the round trip, so when the
 * answer arrives its time is at least the value read. now() counts from that lower bound (the best
 * of the samples) and rounds down, so a slot the scheduler finds due is due on the server too, and
 * the transaction that fires it starts (created_at) at or after the slot. It runs behind by at most
 * the round trip (errorMs). What it cannot see: the server's clock stepping back, or running slower
 * than this host's monotonic clock between two syncs (a minute apart; NTP-disciplined clocks differ
 * by well under a millisecond in that time).
 */
import type { Clock, TimerHandle } from '../../clock.js';
import { systemClock } from '../../clock.js';

export interface LedgerClockOptions {
  /** The server's current time, epoch ms (e.g. `SELECT clock_timestamp()`). */
  readServerTime: () => Promise<number>;
  /** Re-sync this often, to follow the server's own NTP corrections. Default 60 s. */
  resyncMs?: number;
  /** Samples per sync; the one with the shortest round trip wins. Default 3. */
  samples?: number;
  /** Host clock, injectable for tests. */
  host?: Pick<Clock, 'now' | 'monotonic'>;
  onSync?: (sync: ClockSync) => void;
  onError?: (err: Error) => void;
}

export interface ClockSync {
  /** Host wall clock minus server clock, ms (positive: the host runs fast). */
  hostOffsetMs: number;
  /** How far behind the server the synced time can be (at most the best round trip); never ahead. */
  errorMs: number;
}

export class LedgerClock implements Clock {
  private anchorServer: number | undefined;
  private anchorMonotonic = 0;
  private timer: NodeJS.Timeout | undefined;
  private last: ClockSync | undefined;
  private readonly host: Pick<Clock, 'now' | 'monotonic'>;

  constructor(private readonly o: LedgerClockOptions) {
    this.host = o.host ?? systemClock;
  }

  /** Sync once (throws if the server cannot be read), then keep re-syncing in the background. */
  async start(): Promise<ClockSync> {
    const first = await this.sync();
    this.timer ??= setInterval(() => {
      this.sync().catch((err: Error) => this.o.onError?.(err));
    }, this.o.resyncMs ?? 60_000);
    this.timer.unref();
    return first;
  }

  stop(): void {
    clearInterval(this.timer);
    this.timer = undefined;
  }

  get lastSync(): ClockSync | undefined {
    return this.last;
  }

  /** This host's wall clock minus the ledger's time, now (undefined before the first sync). */
  hostOffsetMs(): number | undefined {
    return this.last === undefined ? undefined : this.offset(this.last.errorMs);
  }

  /** Reported against the middle of the server's possible times (the best guess), not now()'s bound. */
  private offset(errorMs: number): number {
    const middle = this.anchorServer! + (this.host.monotonic() - this.anchorMonotonic) + errorMs / 2;
    return Math.round(this.host.now() - middle);
  }

  async sync(): Promise<ClockSync> {
    // Server time minus host monotonic time, bounded by each sample: at least the value read
    // against the answer's arrival, at most that value against the request's departure.
    let low = -Infinity;
    let high = Infinity;
    let at = 0;
    for (let i = 0; i < (this.o.samples ?? 3); i++) {
      const sent = this.host.monotonic();
      const server = await this.o.readServerTime();
      const received = this.host.monotonic();
      if (server - received > low) [low, at] = [server - received, received];
      high = Math.min(high, server - sent);
    }
    this.anchorServer = at + low;
    this.anchorMonotonic = at;
    const errorMs = Math.max(0, high - low);
    this.last = { hostOffsetMs: this.offset(errorMs), errorMs };
    this.o.onSync?.(this.last);
    return this.last;
  }

  now(): number {
    // Before the first sync there is nothing better than the host's clock.
    if (this.anchorServer === undefined) return this.host.now();
    // Down, never up: rounding must not put the scheduler ahead of the server.
    return Math.floor(this.anchorServer + (this.host.monotonic() - this.anchorMonotonic));
  }

  monotonic(): number {
    return this.host.monotonic();
  }

  setTimer(fn: () => void, ms: number): TimerHandle {
    return systemClock.setTimer(fn, ms);
  }

  sleep(ms: number, signal?: AbortSignal): Promise<void> {
    return systemClock.sleep(ms, signal);
  }
}
