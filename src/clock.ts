/**
 * Time, injected. The scheduler and the lease helpers never read Date.now() or performance.now()
 * directly, so tests can drive time without sleeping (as client-go's elector and graphile-worker do).
 */
export interface TimerHandle {
  cancel(): void;
}

export interface Clock {
  /** Wall-clock epoch milliseconds: what cron schedules are computed against. */
  now(): number;
  /** Monotonic milliseconds: what lease deadlines are measured on (never jumps with NTP). */
  monotonic(): number;
  /** Call fn after ms of monotonic time. */
  setTimer(fn: () => void, ms: number): TimerHandle;
  /** Resolve after ms, or reject with the signal's reason once it aborts. */
  sleep(ms: number, signal?: AbortSignal): Promise<void>;
}

export const systemClock: Clock = {
  now: () => Date.now(),
  monotonic: () => performance.now(),
  setTimer(fn, ms) {
    const t = setTimeout(fn, Math.max(0, ms));
    return { cancel: () => clearTimeout(t) };
  },
  sleep(ms, signal) {
    return new Promise((resolve, reject) => {
      if (signal?.aborted) return reject(signal.reason);
      const onAbort = () => {
        clearTimeout(t);
        reject(signal?.reason);
      };
      const t = setTimeout(() => {
        signal?.removeEventListener('abort', onAbort);
        resolve();
      }, Math.max(0, ms));
      signal?.addEventListener('abort', onAbort, { once: true });
    });
  },
};
