import { z } from 'zod';
import { InvalidConfigError, InvalidScheduleError } from '../errors.js';
import { CronSchedule } from '../cron/cron-schedule.js';
import type { MisfirePolicy, OverlapPolicy, ScheduledJob } from '../cron/scheduled-job.js';
import type { DstGap, DstRepeat } from '../cron/cron-schedule.js';
import type { JobHandler } from './job-context.js';

export type { DstGap, DstRepeat, MisfirePolicy, OverlapPolicy };

/** Default of maxCatchUp: the cap planCatchUp always had, now per job. */
export const DEFAULT_MAX_CATCH_UP = 1000;

export interface BackoffOptions {
  type: 'fixed' | 'exponential';
  delayMs: number;
}

/** The run a concurrency key is computed for. */
export interface RunIdentity {
  readonly job: string;
  readonly scheduledAt: Date;
  /** A runtime schedule's or one-off run's payload; a workflow step's item. */
  readonly payload: unknown;
}

/**
 * At most `limit` runs hold `key` at once, across every replica and every job that names it (runs
 * over the limit wait in the ledger, in order). `key` may be computed from the run (per customer).
 */
export interface ConcurrencyLimit {
  key: string | ((run: RunIdentity) => string);
  limit: number;
}

/**
 * At most `max` runs of every job naming `key` start in any `perMs` window, across replicas (runs
 * over it wait in the ledger for their turn, in order). `key` may be computed from the run.
 */
export interface RateLimit {
  key: string | ((run: RunIdentity) => string);
  max: number;
  perMs: number;
}

export interface JobOptions {
  /** Unique; letters, digits and . _ : - (it becomes part of Redis keys and ledger rows). */
  name: string;
  /** Cron expression in the README's dialect: 5 fields, 6 with leading seconds, or @hourly and friends. */
  schedule: string;
  /** IANA time zone the schedule is read in. Default UTC. */
  timezone?: string;
  /**
   * A wall-clock time the fall-back change repeats fires at its 'first' occurrence (default),
   * its 'last', or 'both'.
   */
  dstRepeat?: DstRepeat;
  /**
   * A wall-clock time the spring-forward change skips fires at the first instant after the gap
   * ('shift', default) or not at all that day ('skip').
   */
  dstGap?: DstGap;
  handler: JobHandler;
  /** What a new leader does with times missed during an election. Default 'all'. */
  misfire?: MisfirePolicy;
  /** What happens when a fire comes while the previous run is still active. Default 'allow'. */
  overlap?: OverlapPolicy;
  /** How far back 'all' / 'latest' may reach after an election. Default 5 minutes. */
  catchUpWindowMs?: number;
  /** A fire later than this counts as a misfire and the misfire policy applies. Default 1 s. */
  misfireGraceMs?: number;
  /**
   * At most this many late slots fire in one catch-up, the most recent ones, at once; the older
   * ones in the window are reported missed. 0 fires none late. Default 1,000 (at most 1,000).
   */
  maxCatchUp?: number;
  /** Overlap 'queue': at most this many runs wait behind the active one; more are recorded skipped. Default 1. */
  overlapQueueMax?: number;
  /** Random delay (0..jitter) added to delivery; scheduledAt is unchanged. Default 0. */
  jitterMs?: number;
  /** Abort the handler's signal after this long; 0 = no timeout. Default 0. */
  timeoutMs?: number;
  /** Extra attempts after a failure. Default 0. */
  retries?: number;
  /** Delay between retries. Default exponential from 1 s. */
  backoff?: BackoffOptions;
  /** A concurrency limit shared across replicas and jobs (see ConcurrencyLimit). */
  concurrency?: ConcurrencyLimit;
  /** A rate limit shared across replicas and jobs (see RateLimit). */
  rateLimit?: RateLimit;
  /** Among runs waiting for a slot of the same concurrency key, higher first. -1,000 to 1,000; default 0. */
  priority?: number;
}

/** A job as defined in code: its schedule and policies (ScheduledJob) plus how it runs. */
export interface JobDefinition extends ScheduledJob {
  readonly schedule: CronSchedule;
  readonly handler: JobHandler;
  readonly jitterMs: number;
  readonly timeoutMs: number;
  readonly retries: number;
  readonly backoff: Readonly<BackoffOptions>;
  readonly concurrency?: Readonly<ConcurrencyLimit>;
  readonly rateLimit?: Readonly<RateLimit>;
  readonly priority: number;
}

const WEEK_MS = 7 * 24 * 3600 * 1000;
/** Shared by every job without its own (one object, not one per job). */
const DEFAULT_BACKOFF: Readonly<BackoffOptions> = Object.freeze({ type: 'exponential', delayMs: 1000 });
const ms = () =>
  z
    .number()
    .int('must be a whole number of milliseconds')
    .min(0, 'must not be negative')
    .max(WEEK_MS, 'must be at most 7 days');

/** A concurrency key: what the ledger keys its slots by. */
export const limitKey = z
  .string()
  .min(1, 'must not be empty')
  .max(200, 'must be at most 200 characters')
  .regex(/^[\x21-\x7e]+$/, 'must be printable ASCII without spaces');

/** A limit's key: a string, or a function of the run that returns one (checked when it is called). */
const keyRule = z.union([
  limitKey,
  z.custom<(run: RunIdentity) => string>((v) => typeof v === 'function', 'must be a key or a function'),
]);

const jobSchema = z.strictObject({
  name: z
    .string()
    .min(1, 'must not be empty')
    .max(128, 'must be at most 128 characters')
    .regex(/^[A-Za-z0-9._:-]+$/, 'may contain only letters, digits and . _ : -'),
  schedule: z.string().min(1, 'must be a cron expression'),
  timezone: z.string().min(1).optional(),
  dstRepeat: z.enum(['first', 'last', 'both']).optional(),
  dstGap: z.enum(['shift', 'skip']).optional(),
  handler: z.custom<JobHandler>((v) => typeof v === 'function', 'must be a function'),
  misfire: z.enum(['all', 'latest', 'skip']).optional(),
  overlap: z.enum(['allow', 'skip', 'queue', 'coalesce', 'replace']).optional(),
  catchUpWindowMs: ms().optional(),
  misfireGraceMs: ms().optional(),
  maxCatchUp: z
    .number()
    .int('must be a whole number')
    .min(0, 'must not be negative')
    .max(DEFAULT_MAX_CATCH_UP, `must be at most ${DEFAULT_MAX_CATCH_UP}`)
    .optional(),
  overlapQueueMax: z
    .number()
    .int('must be a whole number')
    .min(1, 'must be at least 1')
    .max(1000, 'must be at most 1000')
    .optional(),
  jitterMs: ms().optional(),
  timeoutMs: ms().optional(),
  retries: z
    .number()
    .int('must be a whole number')
    .min(0, 'must not be negative')
    .max(100, 'must be at most 100')
    .optional(),
  backoff: z.strictObject({ type: z.enum(['fixed', 'exponential']), delayMs: ms() }).optional(),
  concurrency: z
    .strictObject({
      key: keyRule,
      limit: z
        .number()
        .int('must be a whole number')
        .min(1, 'must be at least 1')
        .max(10_000, 'must be at most 10,000'),
    })
    .optional(),
  rateLimit: z
    .strictObject({
      key: keyRule,
      max: z
        .number()
        .int('must be a whole number')
        .min(1, 'must be at least 1')
        .max(100_000, 'must be at most 100,000'),
      perMs: ms().min(1, 'must be at least 1'),
    })
    .optional(),
  priority: z
    .number()
    .int('must be a whole number')
    .min(-1000, 'must be at least -1,000')
    .max(1000, 'must be at most 1,000')
    .optional(),
});

/**
 * Define a job in code. Everything is checked here, at definition, so a typo in a cron
 * expression, time zone or option stops start-up with a message naming the job and the field.
 */
export function defineJob(options: JobOptions): JobDefinition {
  const label = typeof options?.name === 'string' && options.name ? `job "${options.name}"` : 'job';
  const parsed = jobSchema.safeParse(options);
  if (!parsed.success) {
    const issue = parsed.error.issues[0]!;
    const field = issue.path.join('.') || (issue.code === 'unrecognized_keys' ? issue.keys.join(', ') : 'options');
    throw new InvalidConfigError(`${label}: ${field}`, issue.message);
  }
  const o = parsed.data;
  let schedule: CronSchedule;
  try {
    schedule = CronSchedule.parse(o.schedule, o.timezone ?? 'UTC', { repeat: o.dstRepeat, gap: o.dstGap });
  } catch (err) {
    if (err instanceof InvalidScheduleError)
      throw new InvalidScheduleError(err.expression, err.reason, `${label}: schedule`);
    if (err instanceof InvalidConfigError)
      throw new InvalidConfigError(`${label}: ${err.setting}`, err.message.slice(err.setting.length + 2));
    throw err;
  }
  return Object.freeze({
    name: o.name,
    schedule,
    handler: o.handler,
    misfire: o.misfire ?? 'all',
    overlap: o.overlap ?? 'allow',
    catchUpWindowMs: o.catchUpWindowMs ?? 5 * 60 * 1000,
    misfireGraceMs: o.misfireGraceMs ?? 1000,
    maxCatchUp: o.maxCatchUp ?? DEFAULT_MAX_CATCH_UP,
    overlapQueueMax: o.overlapQueueMax ?? 1,
    jitterMs: o.jitterMs ?? 0,
    timeoutMs: o.timeoutMs ?? 0,
    retries: o.retries ?? 0,
    backoff: o.backoff ? Object.freeze(o.backoff) : DEFAULT_BACKOFF,
    ...(o.concurrency ? { concurrency: Object.freeze({ ...o.concurrency }) } : {}),
    ...(o.rateLimit ? { rateLimit: Object.freeze({ ...o.rateLimit }) } : {}),
    priority: o.priority ?? 0,
  });
}
