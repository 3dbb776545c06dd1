/**
 * The small fixed sets of reasons an occurrence (a due instant of a job) was skipped or missed, as
 * metrics label them and `cronwarden explain` names them. A skipped run keeps its full text in
 * cw_runs.error (who paused, why, until when); the class is read back from that text, whose
 * prefixes job-policies.ts and coalesced-fires.ts write.
 */

/** Why due instants were not fired at all (no run): stored as ranges in cw_missed_ranges. */
export const missedReasons = ['catch-up-window', 'misfire-policy', 'max-catch-up', 'max-fires'] as const;
export type MissedReason = (typeof missedReasons)[number];

/** Why a due instant was recorded as a skipped run (or, for 'dst', left out by the DST rule). */
export const skipReasons = ['paused', 'overlap-skip', 'queue-full', 'coalesced', 'dst', 'other'] as const;
export type SkipReason = (typeof skipReasons)[number];

/** The class of a skipped run's recorded reason (cw_runs.error). */
export function classifySkip(error: string | null | undefined): SkipReason {
  const text = error ?? '';
  if (text.startsWith('job is paused')) return 'paused';
  if (text.startsWith('overlap "skip"')) return 'overlap-skip';
  if (text.startsWith('overlap "queue"')) return 'queue-full';
  if (text.startsWith('overlap "coalesce"')) return 'coalesced';
  return 'other';
}

/** What a missed reason means, in one line for people. */
export function describeMissedReason(reason: MissedReason): string {
  switch (reason) {
    case 'catch-up-window':
      return 'older than the catch-up window when a leader got to it';
    case 'misfire-policy':
      return 'late, and the misfire policy does not fire it';
    case 'max-catch-up':
      return 'over the maxCatchUp late fires of one catch-up';
    case 'max-fires':
      return 'over the bound on fires of one catch-up';
  }
}
