/**
 * The scheduler's wall clock, taken from the ledger's PostgreSQL server instead of the host.
 *
 * A replica whose host clock runs five minutes fast would otherwise fire five minutes of
 * schedules at once the moment it leads, and one running slow would fire nothing until its clock
 * caught up. Every replica reads the same server's clock instead (the one that already decides
 * the postgres lease and stamps every run), so skew or a jump on one host changes nothing.
 *
 * now() = the server's time at the last sync + monotonic time elapsed since, so a jump of the
 * host's wall clock between syncs is invisible too. Each sync keeps the sample with the shortest
 * round trip (its error is at most half that round trip), as NTP does.
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
  /** Half the best round trip: how far off the synced time can be. */
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
    return this.anchorServer === undefined ? undefined : Math.round(this.host.now() - this.now());
  }

  async sync(): Promise<ClockSync> {
    let best: { server: number; at: number; rtt: number } | undefined;
    for (let i = 0; i < (this.o.samples ?? 3); i++) {
      const sent = this.host.monotonic();
      const server = await this.o.readServerTime();
      const received = this.host.monotonic();
      const rtt = received - sent;
      // The server read its clock somewhere inside the round trip: assume the middle.
      if (!best || rtt < best.rtt) best = { server: server + rtt / 2, at: received, rtt };
    }
    this.anchorServer = best!.server;
    this.anchorMonotonic = best!.at;
    this.last = { hostOffsetMs: Math.round(this.host.now() - this.now()), errorMs: best!.rtt / 2 };
    this.o.onSync?.(this.last);
    return this.last;
  }

  now(): number {
    // Before the first sync there is nothing better than the host's clock.
    if (this.anchorServer === undefined) return this.host.now();
    return Math.round(this.anchorServer + (this.host.monotonic() - this.anchorMonotonic));
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
