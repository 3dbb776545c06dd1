/**
 * The slot token orders the runs of a resource by scheduled time first and by attempt second:
 * scheduled instant (epoch ms) × 1,000,000 + the attempt number. It is what ctx.fence stores and
 * what handlers hand to guards in their own stores (ctx.slotToken): a catch-up run of 10:00:04
 * that comes after 10:00:05 already wrote is superseded, not stale, and a newer attempt of the
 * same run always outranks an older one. Fits a signed 64-bit integer until the year 2262.
 */
const ATTEMPT_SPAN = 1_000_000n;

export function slotToken(scheduledAt: Date, attempt: number): bigint {
  return (
    BigInt(scheduledAt.getTime()) * ATTEMPT_SPAN + BigInt(Math.min(Math.max(attempt, 0), Number(ATTEMPT_SPAN) - 1))
  );
}

/** The scheduled instant a slot token stands for. */
export function slotOf(token: bigint): Date {
  return new Date(Number(token / ATTEMPT_SPAN));
}
