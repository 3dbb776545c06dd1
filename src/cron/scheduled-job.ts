/**
 * What the scheduler knows of a job: when it fires and what to do with missed and overlapping
 * fires. Jobs (src/jobs) extend it with the handler and its policies; the scheduler never needs those.
 */
import type { CronSchedule } from './cron-schedule.js';

export type MisfirePolicy = 'all' | 'latest' | 'skip';
export type OverlapPolicy = 'allow' | 'skip' | 'queue' | 'coalesce' | 'replace';

/**
 * What the fire loop asks of a schedule. A job from code has a CronSchedule; a runtime schedule
 * has one made of its versions (runtime-schedules.ts), each in effect for its own span of time.
 */
export type FireSchedule = Pick<CronSchedule, 'expression' | 'timezone' | 'nextAfter' | 'between'>;

export interface ScheduledJob {
  readonly name: string;
  readonly schedule: FireSchedule;
  readonly misfire: MisfirePolicy;
  readonly overlap: OverlapPolicy;
  /** How far back 'all' / 'latest' may reach after an election. */
  readonly catchUpWindowMs: number;
  /** A fire later than this counts as a misfire and the misfire policy applies. */
  readonly misfireGraceMs: number;
  /**
   * At most this many late slots fire in one catch-up (the most recent ones, at once); older ones
   * in the window are reported missed. On-time slots do not count.
   */
  readonly maxCatchUp: number;
  /** Overlap 'queue': at most this many runs wait behind the active one; more are recorded skipped. */
  readonly overlapQueueMax: number;
}

/** A workflow's step as the admin API lists it: its name, what it needs, whether it fans out. */
export interface StepShape {
  readonly name: string;
  readonly needs: readonly string[];
  readonly mapped: boolean;
}

/** A job from code: its schedule is one cron expression with its DST policy. */
export interface CodeJob extends ScheduledJob {
  readonly schedule: CronSchedule;
  /** A workflow's steps (its fires start a workflow run); absent for a job. */
  readonly workflowSteps?: readonly StepShape[];
}

/** The jobs the leader fires, by name (JobRegistry is the implementation). */
export interface ScheduledJobs {
  get(name: string): ScheduledJob | undefined;
  /** Throws when no such job is defined. */
  require(name: string): ScheduledJob;
  list(): readonly ScheduledJob[];
}
