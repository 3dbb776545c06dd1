import { z } from 'zod';
import { InvalidArgumentError } from '../errors.js';
import type { LeaseRequest } from './lease.js';

/** A lease longer than a day is almost surely a unit mistake (seconds given as milliseconds…). */
export const MAX_TTL_MS = 24 * 60 * 60 * 1000;
/** Below this, no backend can renew in time over a real network. */
export const MIN_TTL_MS = 100;

/** Default margin: a tenth of the TTL, at least 50 ms, and never more than half of the TTL. */
export function defaultSafetyMargin(ttlMs: number): number {
  return Math.min(Math.max(50, Math.round(ttlMs / 10)), Math.floor(ttlMs / 2));
}

const requestSchema = z.object({
  name: z
    .string()
    .min(1, 'must not be empty')
    .max(200, 'must be at most 200 characters')
    .regex(/^[A-Za-z0-9._:/-]+$/, 'may contain only letters, digits and . _ : / -'),
  holder: z.string().min(1, 'must not be empty').max(200, 'must be at most 200 characters'),
  ttlMs: z
    .number()
    .int('must be a whole number of milliseconds')
    .min(MIN_TTL_MS, `must be at least ${MIN_TTL_MS} ms`)
    .max(MAX_TTL_MS, `must be at most ${MAX_TTL_MS} ms (24 h)`),
  safetyMarginMs: z.number().int('must be a whole number of milliseconds').min(0, 'must not be negative').optional(),
});

export interface ValidLeaseRequest extends LeaseRequest {
  readonly safetyMarginMs: number;
}

/** Refuse bad input up front with a message that names the field. */
export function validateLeaseRequest(request: LeaseRequest): ValidLeaseRequest {
  const parsed = requestSchema.safeParse(request);
  if (!parsed.success) {
    const issue = parsed.error.issues[0]!;
    throw new InvalidArgumentError(`lease request ${issue.path.join('.') || 'value'} ${issue.message}`);
  }
  const margin = parsed.data.safetyMarginMs ?? defaultSafetyMargin(parsed.data.ttlMs);
  if (margin >= parsed.data.ttlMs) {
    throw new InvalidArgumentError(
      `lease request safetyMarginMs (${margin}) must be smaller than ttlMs (${parsed.data.ttlMs})`,
    );
  }
  return { ...parsed.data, safetyMarginMs: margin };
}

/**
 * The holder's own deadline: from when the request was SENT (not answered), on the monotonic clock,
 * minus the margin. A reply that arrives late cannot stretch it.
 */
export function localDeadline(sentAtMonotonic: number, request: ValidLeaseRequest): number {
  return sentAtMonotonic + request.ttlMs - request.safetyMarginMs;
}
