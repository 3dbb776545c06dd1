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

/**
 * setTimeout holds at most 2^31 - 1 ms (about 24.8 days); a longer delay fires after 1 ms with a
 * TimeoutOverflowWarning. A yearly job's next fire is further away than that, so longer waits are
 * taken in steps, each re-aimed at the same monotonic due time.
 */
const MAX_TIMEOUT_MS = 2 ** 31 - 1;

export const systemClock: Clock = {
  now: () => Date.now(),
  monotonic: () => performance.now(),
  setTimer(fn, ms) {
    const due = performance.now() + Math.max(0, ms);
    let t: NodeJS.Timeout;
    const arm = () => {
      const left = Math.max(0, due - performance.now());
      t = left > MAX_TIMEOUT_MS ? setTimeout(arm, MAX_TIMEOUT_MS) : setTimeout(fn, left);
    };
    arm();
    return { cancel: () => clearTimeout(t) };
  },
  sleep(ms, signal) {
    return new Promise((resolve, reject) => {
      if (signal?.aborted) return reject(signal.reason);
      const onAbort = () => {
        timer.cancel();
        reject(signal?.reason);
      };
      const timer = systemClock.setTimer(() => {
        signal?.removeEventListener('abort', onAbort);
        resolve();
      }, ms);
      signal?.addEventListener('abort', onAbort, { once: true });
    });
  },
};
