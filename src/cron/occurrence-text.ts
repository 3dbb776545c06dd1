/**
 * One line per timeline entry: what happened at the instant (or the collapsed range) and why, as
 * the explain API serves it and `cronwarden explain` prints it.
 */
import { describeMissedReason } from './occurrence-reasons.js';
import type { OccurrenceEntry } from './occurrence-timeline.js';

const iso = (ms: number) => new Date(ms).toISOString();
const times = (e: OccurrenceEntry) => (e.count === 1 ? '' : ` (${e.count}${e.exact ? '' : '+'} instants)`);

export function occurrenceText(e: OccurrenceEntry): string {
  switch (e.outcome) {
    case 'fired': {
      const run = e.run!;
      return e.count === 1
        ? `fired: run ${run.runId}, ${run.state} (${run.trigger})`
        : `fired${times(e)}: runs ${run.state} (${run.trigger}), the first run ${run.runId}`;
    }
    case 'skipped': {
      const skip = e.skip!;
      return `skipped${times(e)} [${skip.reason}]: ${skip.text ?? 'no reason recorded'}`;
    }
    case 'missed': {
      const m = e.missed!;
      const start = m.outageStartMs === null ? 'the job had never fired' : `last handled ${iso(m.outageStartMs)}`;
      return (
        `missed${times(e)} [${m.reason}]: ${describeMissedReason(m.reason)}; outage from ${start} ` +
        `until ${iso(m.outageEndMs)}, decided by leader ${m.leaderId} (token ${m.leaderToken})`
      );
    }
    case 'not-yet-due':
      return `not yet due${times(e)}`;
    case 'not-accounted': {
      const n = e.notAccounted!;
      if (n.why === 'before-first-era') return `not accounted${times(e)}: before the job's first schedule era`;
      if (n.why === 'retention') return `not accounted${times(e)}: its run may have been deleted by retention`;
      const since = n.sinceMs === null ? '' : ` since ${iso(n.sinceMs)}`;
      return `not accounted yet${times(e)}: no leader has handled the job${since}`;
    }
    case 'unanswered':
      return `UNANSWERED${times(e)}: due, at or before what the leader accounted for, with no run and no missed range`;
  }
}
