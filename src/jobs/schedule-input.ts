/**
 * What the API and the CLI accept for a runtime schedule, checked exactly as defineJob checks a
 * job from code (the same schema and messages: defineJob itself does it), plus the handler, which
 * must be a job this replica defines. Nothing is stored unless all of it passes.
 */
import { z } from 'zod';
import { InvalidConfigError } from '../errors.js';
import type { ScheduleSpec } from '../ledger/schedule-ledger.js';
import { defineJob } from './define-job.js';
import type { JobRegistry } from './job-registry.js';
import { UnknownJobError } from './job-registry.js';
import { payloadSchema } from './payload.js';

/**
 * A schedule's id: the same alphabet as job names (it becomes part of the run's job name), and it
 * starts with a letter or digit: "." and ".." would be path segments that URLs resolve away (no
 * CLI or HTTP client could reach them), and a leading "-" would read as a CLI option.
 */
export const scheduleId = z
  .string()
  .min(1, 'must not be empty')
  .max(128, 'must be at most 128 characters')
  .regex(/^[A-Za-z0-9._:-]+$/, 'may contain only letters, digits and . _ : -')
  .regex(/^[A-Za-z0-9]/, 'must start with a letter or digit (so "." and ".." are refused)');

const inputSchema = z.strictObject({
  handler: z.string().min(1, 'must name a job defined in code'),
  schedule: z.string(),
  timezone: z.string().optional(),
  misfire: z.string().optional(),
  overlap: z.string().optional(),
  catchUpWindowMs: z.number().optional(),
  misfireGraceMs: z.number().optional(),
  payload: payloadSchema.optional(),
  paused: z.boolean().optional(),
});

export type ScheduleInput = z.input<typeof inputSchema>;

/** A full input (create), or a partial one laid over `base` (update). Throws InvalidConfigError. */
export function validateSchedule(id: string, input: unknown, registry: JobRegistry, base?: ScheduleSpec): ScheduleSpec {
  const idOk = scheduleId.safeParse(id);
  if (!idOk.success) throw new InvalidConfigError('schedule id', idOk.error.issues[0]!.message);
  const merged = base ? { ...fromSpec(base), ...(typeof input === 'object' && input !== null ? input : {}) } : input;
  const parsed = inputSchema.safeParse(merged);
  if (!parsed.success) {
    const issue = parsed.error.issues[0]!;
    const field = issue.path.join('.') || (issue.code === 'unrecognized_keys' ? issue.keys.join(', ') : 'options');
    throw new InvalidConfigError(`schedule "${id}": ${field}`, issue.message);
  }
  const o = parsed.data;
  if (!registry.get(o.handler)) throw new UnknownJobError(o.handler);
  // The same checks, defaults and messages as a job defined in code.
  const job = defineJob({
    name: id,
    schedule: o.schedule,
    timezone: o.timezone,
    misfire: o.misfire as never,
    overlap: o.overlap as never,
    catchUpWindowMs: o.catchUpWindowMs,
    misfireGraceMs: o.misfireGraceMs,
    handler: () => undefined,
  });
  const payload = o.payload === undefined ? null : o.payload;
  return {
    handler: o.handler,
    cron: job.schedule.expression,
    timezone: job.schedule.timezone,
    misfire: job.misfire,
    overlap: job.overlap,
    catchUpWindowMs: job.catchUpWindowMs,
    misfireGraceMs: job.misfireGraceMs,
    payload,
    paused: o.paused ?? false,
  };
}

function fromSpec(s: ScheduleSpec): ScheduleInput {
  return {
    handler: s.handler,
    schedule: s.cron,
    timezone: s.timezone,
    misfire: s.misfire,
    overlap: s.overlap,
    catchUpWindowMs: s.catchUpWindowMs,
    misfireGraceMs: s.misfireGraceMs,
    payload: s.payload,
    paused: s.paused,
  };
}
