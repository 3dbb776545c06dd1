/**
 * What /healthz and /readyz answer, wherever they are served: the admin server (in its thread or
 * the scheduler's) and the probe listener (the scheduler's thread, see probe-server.ts).
 */
import { TimedOutError } from '../errors.js';
import type { LeaseBackend } from '../locks/lease.js';
import { SharedCheck } from './guards.js';
import type { ReplicaView } from './replica-view.js';

export interface ProbeAnswer {
  status: number;
  body: Record<string, unknown>;
}

/**
 * Liveness. `stalled` says why the scheduler's event loop cannot be vouched for (its heartbeat is
 * stale), if so; like client-go's healthz adaptor, a replica that believes it leads past its lease
 * deadline is unhealthy too.
 */
export function health(r: ReplicaView, stalled: string | undefined): ProbeAnswer {
  if (stalled) return { status: 503, body: { ok: false, error: stalled, role: r.role } };
  if (r.role === 'leader' && !r.lease()) {
    return { status: 503, body: { ok: false, error: 'leading past the lease deadline without a renew', role: r.role } };
  }
  return { status: 200, body: { ok: true, role: r.role, replicaId: r.replicaId } };
}

export type Readiness = SharedCheck<{ backend: string; database: string }>;

/**
 * Readiness: the lease backend and the ledger's pool answer within `timeoutMs`. One check is
 * shared among concurrent callers and reused for 500 ms, so a flood of probes costs at most one
 * round trip to each at a time.
 */
export function readinessCheck(
  r: ReplicaView,
  backend: Pick<LeaseBackend, 'current'>,
  timeoutMs: number,
  monotonic: () => number,
): Readiness {
  return new SharedCheck(
    async () => {
      const [b, database] = await Promise.all([
        check(() => backend.current(r.leaseName), timeoutMs),
        check(() => r.pingLedger(), timeoutMs),
      ]);
      return { backend: b, database };
    },
    monotonic,
    500,
  );
}

export async function readiness(ready: Readiness): Promise<ProbeAnswer> {
  const { backend, database } = await ready.get();
  const ok = backend === 'ok' && database === 'ok';
  return { status: ok ? 200 : 503, body: { ok, backend, database } };
}

/** 'ok', or why `fn` failed or did not answer within `ms`. */
async function check(fn: () => Promise<unknown>, ms: number): Promise<string> {
  let timer: NodeJS.Timeout | undefined;
  try {
    await Promise.race([
      fn(),
      new Promise((_, reject) => {
        timer = setTimeout(() => reject(new TimedOutError('readiness check', ms)), ms);
      }),
    ]);
    return 'ok';
  } catch (err) {
    return (err as Error).message;
  } finally {
    clearTimeout(timer);
  }
}
