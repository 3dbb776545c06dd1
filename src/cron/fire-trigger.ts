/**
 * Why a run was committed: on schedule, caught up after an election (or later than the job's
 * misfire grace), triggered by hand, by a follower standing in for a silent leader (a scheduled slot
 * all the same, inside the unique (job, scheduled_at) key like 'schedule' and 'catchup'), a backfill
 * of past slots (in that key too), or a one-off run (outside it, keyed by its once_key).
 */
export const fireTriggers = ['schedule', 'catchup', 'manual', 'standin', 'backfill', 'once'] as const;
export type FireTrigger = (typeof fireTriggers)[number];
