import { AbortedError } from '../errors.js';
import type { Clock } from '../clock.js';
import type { Lease, LeaseBackend, LeaseRequest } from './lease.js';

export interface WaitOptions {
  clock: Clock;
  /** Upper bound between attempts when no notification arrives (lost pub/sub message, etc.). */
  maxWaitMs?: number;
}

/**
 * Blocking acquire for backends without a native queue (Redis, PostgreSQL, memory): try, and if
 * the lease is held, sleep until either the backend says it changed or the holder's TTL runs out,
 * then try again. Waking on expiry as well as on notifications means a missed notification costs
 * at most one TTL, never a hang. Not FIFO: whoever tries first after a release wins.
 */
export async function waitForLease(
  backend: Pick<LeaseBackend, 'tryAcquire' | 'current' | 'onChange'>,
  request: LeaseRequest,
  signal: AbortSignal | undefined,
  options: WaitOptions,
): Promise<Lease> {
  const maxWait = options.maxWaitMs ?? Math.max(request.ttlMs, 1000);
  let wake: (() => void) | undefined;
  let changed = false;
  const unsubscribe = await backend.onChange(request.name, () => {
    changed = true;
    wake?.();
  });
  try {
    for (;;) {
      if (signal?.aborted) throw new AbortedError(`acquire of lease "${request.name}"`, { cause: signal.reason });
      changed = false;
      const lease = await backend.tryAcquire(request);
      if (lease) return lease;
      const holder = await backend.current(request.name);
      if (changed) continue;
      const waitMs = Math.min(maxWait, holder ? holder.expiresInMs + 5 : 0);
      await new Promise<void>((resolve) => {
        const timer = options.clock.setTimer(done, waitMs);
        const onAbort = () => done();
        signal?.addEventListener('abort', onAbort, { once: true });
        wake = done;
        // Aborted while tryAcquire or current was in flight: a listener added now never fires.
        if (signal?.aborted) done();
        function done() {
          timer.cancel();
          signal?.removeEventListener('abort', onAbort);
          wake = undefined;
          resolve();
        }
      });
    }
  } finally {
    await unsubscribe();
  }
}
