/**
 * An instant as a person in a job's zone reads it: local date and time with the zone's offset at
 * that instant ("2027-01-01 00:00:00 +01:00"), so a Berlin daily job shows its own wall clock.
 */
const formats = new Map<string, Intl.DateTimeFormat>();

function format(zone: string): Intl.DateTimeFormat {
  let f = formats.get(zone);
  if (!f) {
    f = new Intl.DateTimeFormat('en-CA', {
      timeZone: zone,
      hourCycle: 'h23',
      year: 'numeric',
      month: '2-digit',
      day: '2-digit',
      hour: '2-digit',
      minute: '2-digit',
      second: '2-digit',
      timeZoneName: 'longOffset',
    });
    formats.set(zone, f);
  }
  return f;
}

export interface ZonedInstant {
  /** The instant, UTC ISO. */
  at: string;
  /** Local date and time in the zone: "2027-01-01 00:00:00". */
  local: string;
  /** The zone's offset at that instant: "+01:00" ("+00:00" for UTC). */
  offset: string;
}

export function zoned(ms: number, zone: string): ZonedInstant {
  const parts = Object.fromEntries(
    format(zone)
      .formatToParts(new Date(ms))
      .map((p) => [p.type, p.value]),
  );
  const offset = (parts.timeZoneName ?? 'GMT').replace(/^GMT/, '') || '+00:00';
  return {
    at: new Date(ms).toISOString(),
    local: `${parts.year}-${parts.month}-${parts.day} ${parts.hour}:${parts.minute}:${parts.second}`,
    offset,
  };
}
