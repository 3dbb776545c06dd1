/**
 * Why a run was committed: on schedule, caught up after an election (or later than the job's
 * misfire grace), triggered by hand, by a follower standing in for a silent leader (a scheduled slot
 * all the same, inside the unique (job, scheduled_at) key like 'schedule' and 'catchup'), a backfill
 * of past slots (in that key too), a one-off run (outside it, keyed by its once_key), or a step of a
 * workflow run made ready by its needs' completion (outside it, keyed by (workflow run, step, item)).
 */
export const fireTriggers = ['schedule', 'catchup', 'manual', 'standin', 'backfill', 'once', 'step'] as const;
export type FireTrigger = (typeof fireTriggers)[number];
