/**
 * The preview behind `GET /api/jobs/:name/next` and `cronwarden next`: a job's upcoming fire
 * instants with their zone offsets, days with a DST change marked, and what the job's DST policy
 * did to each fire on such a day.
 */
import { zoneOffsetMs, type CronSchedule, type DstNote } from './cron-schedule.js';

const DAY_MS = 86_400_000;

export interface PreviewEntry {
  /** The instant, UTC ISO-8601. */
  at: string;
  /** The same instant as local wall time with its offset, e.g. "2026-03-29T03:00:00+02:00". */
  local: string;
  /** The zone's offset at the instant, "+02:00". */
  offset: string;
  /** True when the zone's offset changes during this local day. */
  dstDay: boolean;
  /** What the DST policy did to this fire, if a transition is near. */
  dst: DstNote | null;
}

/** The next `count` fires strictly after `afterMs`. */
export function previewFires(schedule: CronSchedule, afterMs: number, count: number): PreviewEntry[] {
  const out: PreviewEntry[] = [];
  let t = schedule.nextAfter(afterMs);
  while (t !== null && out.length < count) {
    out.push(previewEntry(schedule, t));
    t = schedule.nextAfter(t);
  }
  return out;
}

function previewEntry(schedule: CronSchedule, t: number): PreviewEntry {
  const zone = schedule.timezone;
  const offset = zoneOffsetMs(t, zone);
  const wall = t + offset;
  const dayStart = Math.floor(wall / DAY_MS) * DAY_MS;
  // Offsets at local midnight and the next local midnight (either side of any change that day).
  const dstDay = zoneOffsetMs(dayStart - offset, zone) !== zoneOffsetMs(dayStart + DAY_MS - offset, zone);
  return {
    at: new Date(t).toISOString(),
    local: `${new Date(wall).toISOString().slice(0, 19)}${formatOffset(offset)}`,
    offset: formatOffset(offset),
    dstDay,
    dst: schedule.dstNote(t),
  };
}

/** "+05:30", "-04:00", "+00:00". */
export function formatOffset(ms: number): string {
  const minutes = Math.round(Math.abs(ms) / 60_000);
  const hh = String(Math.floor(minutes / 60)).padStart(2, '0');
  const mm = String(minutes % 60).padStart(2, '0');
  return `${ms < 0 ? '-' : '+'}${hh}:${mm}`;
}
