import type { Clock, TimerHandle } from '../../src/clock.js';

interface PendingTimer {
  at: number;
  seq: number;
  fn: () => void;
}

/**
 * A clock that only moves when told to. `advance(ms)` runs every timer that falls due, in time
 * order, letting promise callbacks settle between timers so async code reacts as it would live.
 * Wall time and monotonic time move together unless `jumpWall` skews the wall clock alone.
 */
export class ManualClock implements Clock {
  private wall: number;
  private mono = 0;
  private seq = 0;
  private timers: PendingTimer[] = [];

  constructor(startWallMs = Date.UTC(2026, 0, 1)) {
    this.wall = startWallMs;
  }

  now(): number {
    return this.wall;
  }

  monotonic(): number {
    return this.mono;
  }

  setTimer(fn: () => void, ms: number): TimerHandle {
    const timer = { at: this.mono + Math.max(0, ms), seq: this.seq++, fn };
    this.timers.push(timer);
    return { cancel: () => (this.timers = this.timers.filter((t) => t !== timer)) };
  }

  sleep(ms: number, signal?: AbortSignal): Promise<void> {
    return new Promise((resolve, reject) => {
      if (signal?.aborted) return reject(signal.reason);
      const handle = this.setTimer(() => {
        signal?.removeEventListener('abort', onAbort);
        resolve();
      }, ms);
      const onAbort = () => {
        handle.cancel();
        reject(signal?.reason);
      };
      signal?.addEventListener('abort', onAbort, { once: true });
    });
  }

  /** Number of timers still waiting. */
  get pending(): number {
    return this.timers.length;
  }

  /** Move both clocks forward by ms, firing due timers in order. */
  async advance(ms: number): Promise<void> {
    const target = this.mono + ms;
    for (;;) {
      await settle();
      const next = this.nextDue(target);
      if (!next) break;
      this.timers = this.timers.filter((t) => t !== next);
      this.wall += next.at - this.mono;
      this.mono = next.at;
      next.fn();
    }
    this.wall += target - this.mono;
    this.mono = target;
    await settle();
  }

  /** Move to an absolute wall time (must not be in the past). */
  async advanceTo(wallMs: number): Promise<void> {
    if (wallMs < this.wall) throw new RangeError(`advanceTo(${wallMs}) is before now (${this.wall})`);
    await this.advance(wallMs - this.wall);
  }

  /** Skew the wall clock alone (an NTP step or a wrong clock); monotonic time does not move. */
  jumpWall(deltaMs: number): void {
    this.wall += deltaMs;
  }

  private nextDue(limit: number): PendingTimer | undefined {
    let best: PendingTimer | undefined;
    for (const t of this.timers) {
      if (t.at > limit) continue;
      if (!best || t.at < best.at || (t.at === best.at && t.seq < best.seq)) best = t;
    }
    return best;
  }
}

/** Let pending promise callbacks and I/O-free continuations run. */
async function settle(): Promise<void> {
  for (let i = 0; i < 20; i++) await new Promise<void>((r) => setImmediate(r));
}
