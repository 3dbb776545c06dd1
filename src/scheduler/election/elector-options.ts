import { z } from 'zod';
import { InvalidConfigError } from '../../errors.js';
import { defaultSafetyMargin } from '../../locks/lease-request.js';

export interface ElectorOptions {
  /** Lease name shared by all replicas of one deployment. */
  leaseName: string;
  /** This replica's identity (unique per process). */
  replicaId: string;
  /**
   * Lease TTL: how long a crashed leader blocks the others. Its default and valid range are the
   * replica's (src/replica/replica-defaults.ts); here only the timings below are derived from it.
   */
  ttlMs: number;
  /** Renew this often while leading. Default TTL / 3. */
  renewEveryMs?: number;
  /** Followers retry this often when the backend errs or no notification comes. Default TTL / 5. */
  retryPeriodMs?: number;
  /** Random extra wait, 0..jitter, added to each retry so replicas do not move in lockstep. Default retry / 2. */
  retryJitterMs?: number;
  /** See LeaseRequest.safetyMarginMs. Default a tenth of the TTL. */
  safetyMarginMs?: number;
}

export type ResolvedElectorOptions = Required<ElectorOptions>;

const schema = z.object({
  leaseName: z.string().min(1),
  replicaId: z.string().min(1),
  ttlMs: z.number().int().positive(),
  renewEveryMs: z.number().int().positive(),
  retryPeriodMs: z.number().int().positive(),
  retryJitterMs: z.number().int().min(0),
  safetyMarginMs: z.number().int().min(0),
});

/**
 * Fill defaults and check the timings up front, as client-go does: the lease must outlive the
 * margin plus a renew interval, or a healthy leader would step down between two renews.
 */
export function resolveElectorOptions(options: ElectorOptions): ResolvedElectorOptions {
  const ttlMs = options.ttlMs;
  const retryPeriodMs = options.retryPeriodMs ?? Math.max(50, Math.floor(ttlMs / 5));
  const resolved = {
    leaseName: options.leaseName,
    replicaId: options.replicaId,
    ttlMs,
    renewEveryMs: options.renewEveryMs ?? Math.max(1, Math.floor(ttlMs / 3)),
    retryPeriodMs,
    retryJitterMs: options.retryJitterMs ?? Math.floor(retryPeriodMs / 2),
    safetyMarginMs: options.safetyMarginMs ?? defaultSafetyMargin(ttlMs),
  };
  const parsed = schema.safeParse(resolved);
  if (!parsed.success) {
    const issue = parsed.error.issues[0]!;
    throw new InvalidConfigError(`election.${issue.path.join('.')}`, issue.message);
  }
  const renewDeadline = resolved.ttlMs - resolved.safetyMarginMs;
  if (renewDeadline <= 0) {
    throw new InvalidConfigError(
      'election.safetyMarginMs',
      `must be smaller than ttlMs (${resolved.ttlMs}), got ${resolved.safetyMarginMs}`,
    );
  }
  if (resolved.renewEveryMs >= renewDeadline) {
    throw new InvalidConfigError(
      'election.renewEveryMs',
      `must be smaller than ttlMs - safetyMarginMs (${renewDeadline}), got ${resolved.renewEveryMs}`,
    );
  }
  if (resolved.retryPeriodMs >= resolved.ttlMs) {
    throw new InvalidConfigError(
      'election.retryPeriodMs',
      `must be smaller than ttlMs (${resolved.ttlMs}), got ${resolved.retryPeriodMs}`,
    );
  }
  return resolved;
}
