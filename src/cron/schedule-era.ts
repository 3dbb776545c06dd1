/**
 * What identifies the schedule a job's due instants are accounted under (a schedule era): its
 * expression, time zone and DST policy. Two schedules with the same identity have the same due
 * instants, so a leader opens a new era only when a job's identity changes.
 */
import { CronSchedule } from './cron-schedule.js';
import type { FireSchedule } from './scheduled-job.js';

export interface ScheduleIdentity {
  expression: string;
  timezone: string;
  /** "<repeat>/<gap>", as CronSchedule's DstPolicy. */
  dst: string;
}

const DEFAULT_DST = 'first/shift';
/**
 * The expression of an era in which the schedule makes nothing due: a runtime schedule paused or
 * deleted (from the version that stopped it). It parses as no schedule, so no instant is enumerated.
 */
export const STOPPED = '(stopped)';

export function scheduleIdentity(schedule: FireSchedule): ScheduleIdentity {
  const dst = schedule instanceof CronSchedule ? `${schedule.dst.repeat}/${schedule.dst.gap}` : DEFAULT_DST;
  // A runtime schedule (scheduler/schedules/runtime-schedules.ts) says whether it is stopped.
  const stopped = (schedule as { stopped?: boolean }).stopped === true;
  return { expression: stopped ? STOPPED : schedule.expression, timezone: schedule.timezone, dst };
}

export function sameSchedule(a: ScheduleIdentity, b: ScheduleIdentity): boolean {
  return a.expression === b.expression && a.timezone === b.timezone && a.dst === b.dst;
}

/** The schedule an era names, for enumerating its due instants; null if it no longer parses. */
export function scheduleOf(era: ScheduleIdentity): CronSchedule | null {
  if (era.expression === STOPPED) return null;
  const [repeat, gap] = era.dst.split('/');
  try {
    return CronSchedule.parse(era.expression, era.timezone, {
      repeat: repeat as CronSchedule['dst']['repeat'],
      gap: gap as CronSchedule['dst']['gap'],
    });
  } catch {
    return null; // an expression from another version of cronwarden: the reader says so
  }
}
