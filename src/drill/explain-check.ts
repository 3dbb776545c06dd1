/**
 * After a drill: `cronwarden explain`'s reader over the drill's window, for every drill job, held
 * against the checker's history. Each instant the reader answers with a run (fired, skipped) must
 * have a run in the history, each instant it answers otherwise (missed, not accounted) must have
 * none, none may be unanswered, and the reader must enumerate exactly the instants the checker
 * expects. One line says so, or names the disagreements (which fail the drill).
 */
import type pg from 'pg';
import type { Tables } from '../db/tables.js';
import { readOccurrences } from '../ledger/occurrence-reads.js';
import type { History } from './checker.js';

export interface ExplainCheck {
  instants: number;
  disagreements: string[];
  line: string;
}

const iso = (ms: number) => new Date(ms).toISOString();

export async function explainAgainstChecker(
  pool: pg.Pool,
  t: Tables,
  expected: ReadonlyMap<string, readonly number[]>,
  window: { from: Date; to: Date; now: Date },
  history: History,
): Promise<ExplainCheck> {
  const disagreements: string[] = [];
  let instants = 0;
  for (const [job, times] of expected) {
    const runs = history.runs.filter((r) => r.job === job).map((r) => r.scheduledAt);
    const report = await readOccurrences(pool, t, { job, ...window });
    let seen = 0;
    for (const e of report.entries) {
      seen += e.count;
      const withRuns = runs.filter((at) => at >= e.firstMs && at <= e.lastMs).length;
      const span = `${job} ${iso(e.firstMs)}${e.count > 1 ? `..${iso(e.lastMs)}` : ''}`;
      if (e.outcome === 'unanswered')
        disagreements.push(
          `${span}: unanswered (${e.count})${withRuns > 0 ? `, the checker's history has ${withRuns} runs` : ''}`,
        );
      else if ((e.outcome === 'fired' || e.outcome === 'skipped') && withRuns !== e.count)
        disagreements.push(
          `${span}: explain says ${e.outcome} x${e.count}, the checker's history has ${withRuns} runs`,
        );
      else if (e.outcome !== 'fired' && e.outcome !== 'skipped' && withRuns > 0)
        disagreements.push(`${span}: explain says ${e.outcome}, the checker's history has ${withRuns} runs`);
    }
    if (report.truncatedAfterMs !== null) disagreements.push(`${job}: the reader stopped at its limit`);
    const inWindow = times.filter((at) => at >= window.from.getTime() && at <= window.to.getTime()).length;
    if (seen !== inWindow)
      disagreements.push(`${job}: explain enumerates ${seen} instants, the checker expects ${inWindow}`);
    instants += seen;
  }
  const line =
    disagreements.length === 0
      ? `explain: ${instants} instants, all answered, agree with the checker`
      : `explain: ${instants} instants, ${disagreements.length} disagreement(s) with the checker: ${disagreements.slice(0, 5).join('; ')}`;
  return { instants, disagreements, line };
}
