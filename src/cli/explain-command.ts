import type { Command } from 'commander';
import { InvalidArgumentError } from '../errors.js';
import { adminOptions, clientFrom } from './control-command.js';
import { print } from './terminal-text.js';

interface Entry {
  outcome: string;
  first: string;
  last: string;
  count: number;
  exact: boolean;
  text: string;
}
interface Occurrences {
  job: string;
  from: string;
  to: string;
  watermark: string | null;
  eras: { schedule: string; timezone: string; from: string; to: string | null }[];
  entries: Entry[];
  truncatedAfter: string | null;
}

type Opts = { url: string; timeoutMs: string; at?: string; from?: string; to?: string; json?: boolean };

const ISO = /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}(:\d{2}(\.\d{1,9})?)?(Z|[+-]\d{2}:\d{2})$/;
/** Widening look-backs for --at: the instant at or before T is found in the first that holds one. */
const LOOK_BACK_MS = [3_600_000, 86_400_000, 31 * 86_400_000];

/** An ISO instant with its zone, or a usage error (exit 2) before any request. */
function instantArg(option: string, value: string): number {
  const ms = ISO.test(value) ? Date.parse(value) : NaN;
  if (Number.isNaN(ms))
    throw new InvalidArgumentError(
      `${option} "${value.slice(0, 40)}" must be an ISO 8601 instant, e.g. 2026-01-01T00:00:00Z`,
    );
  return ms;
}

/** `cronwarden explain JOB --at T | --from A --to B`: what happened at each due instant, and why. */
export function registerExplain(program: Command): void {
  adminOptions(
    program
      .command('explain')
      .argument('<job>', 'job name (a runtime schedule as <handler>/<id>)')
      .description('say what happened at each due instant of a job, and why (fired, skipped, missed, ...)')
      .option('--at <instant>', 'the due instant at or before this one, with its neighbours')
      .option('--from <instant>', 'start of the range (default: an hour before --to)')
      .option('--to <instant>', 'end of the range (default: now)')
      .option('--json', 'print the raw JSON'),
  ).action(async (job: string, opts: Opts) => {
    if (opts.at !== undefined && (opts.from !== undefined || opts.to !== undefined))
      throw new InvalidArgumentError('--at and --from/--to: give one or the other');
    const client = clientFrom(opts);
    const get = (q: URLSearchParams) =>
      client.get<Occurrences>(`/api/jobs/${encodeURIComponent(job)}/occurrences?${q}`);
    if (opts.at === undefined) {
      const q = new URLSearchParams();
      if (opts.from !== undefined) q.set('from', new Date(instantArg('--from', opts.from)).toISOString());
      if (opts.to !== undefined) q.set('to', new Date(instantArg('--to', opts.to)).toISOString());
      const body = await get(q);
      if (opts.json) return void print(`${JSON.stringify(body, null, 2)}\n`);
      return void print(`${explainText(body, body.entries).join('\n')}\n`);
    }
    const at = instantArg('--at', opts.at);
    for (const back of LOOK_BACK_MS) {
      // A little past T too, for the neighbour after it.
      const q = new URLSearchParams({ from: new Date(at - back).toISOString(), to: new Date(at + back).toISOString() });
      const body = await get(q);
      const i = lastIndexAtOrBefore(body.entries, at);
      if (i < 0 && back !== LOOK_BACK_MS.at(-1)) continue;
      if (opts.json) return void print(`${JSON.stringify(body, null, 2)}\n`);
      if (i < 0) return void print(`${body.job}: no due instant in the 31 days before ${new Date(at).toISOString()}\n`);
      return void print(
        `${explainText(body, body.entries.slice(Math.max(0, i - 1), i + 2), i === 0 ? 0 : 1).join('\n')}\n`,
      );
    }
  });
}

/** The index of the last entry that starts at or before `at`; -1 if none does. */
function lastIndexAtOrBefore(entries: Entry[], at: number): number {
  let found = -1;
  entries.forEach((e, i) => {
    if (Date.parse(e.first) <= at) found = i;
  });
  return found;
}

/** The header and one line per entry; `mark` flags the entry --at asked about. */
function explainText(body: Occurrences, entries: Entry[], mark?: number): string[] {
  const era = body.eras.at(-1);
  const out = [
    `${body.job}  ${era ? `${era.schedule} (${era.timezone})` : 'no schedule era recorded'}  accounted through ${body.watermark ?? '-'}`,
  ];
  entries.forEach((e, i) => {
    const when = e.count === 1 ? e.first : `${e.first} .. ${e.last}`;
    out.push(`${i === mark ? '>' : ' '} ${when}  ${e.text}`);
  });
  if (entries.length === 0) out.push(`  no due instant from ${body.from} to ${body.to}`);
  if (body.truncatedAfter) out.push(`  (more: --from ${new Date(Date.parse(body.truncatedAfter) + 1).toISOString()})`);
  return out;
}
