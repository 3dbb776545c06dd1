import type { Command } from 'commander';
import { InvalidConfigError } from '../errors.js';
import { adminOptions, clientFrom } from './control-command.js';
import { print } from './terminal-text.js';

interface Preview {
  job: string;
  schedule: string;
  timezone: string;
  dstRepeat: string;
  dstGap: string;
  paused: boolean;
  pausedUntil: string | null;
  fires: {
    at: string;
    local: string;
    offset: string;
    dstDay: boolean;
    dst: 'repeated-first' | 'repeated-second' | 'gap-shifted' | null;
    paused: boolean;
  }[];
}

const NOTES = {
  'repeated-first': 'first pass of the repeated hour',
  'repeated-second': 'second pass of the repeated hour',
  'gap-shifted': 'shifted past the skipped hour',
} as const;

/** `cronwarden next JOB --count 20`: the job's upcoming fires with zone offsets, DST days marked. */
export function registerNext(program: Command): void {
  adminOptions(
    program
      .command('next')
      .argument('<job>', 'job name')
      .description("list a job's upcoming fire times with their zone offsets, marking days with a DST change")
      .option('--count <n>', 'how many (1-200)', '20')
      .option('--json', 'print the raw JSON'),
  ).action(async (job: string, opts: { url: string; timeoutMs: string; count: string; json?: boolean }) => {
    if (!/^[1-9][0-9]{0,2}$/.test(opts.count) || Number(opts.count) > 200)
      throw new InvalidConfigError('--count', `must be a whole number from 1 to 200, not "${opts.count}"`);
    const p = await clientFrom(opts).get<Preview>(`/api/jobs/${encodeURIComponent(job)}/next?count=${opts.count}`);
    if (opts.json) {
      print(`${JSON.stringify(p, null, 2)}\n`);
      return;
    }
    const out = [`${p.job}  ${p.schedule}  ${p.timezone}  dstRepeat ${p.dstRepeat}, dstGap ${p.dstGap}`];
    if (p.paused)
      out.push(`paused${p.pausedUntil ? ` until ${p.pausedUntil}` : ''}: slots marked "paused" are skipped`);
    const rows = p.fires.map((f) => [f.at, f.local, f.offset, note(f)]);
    const head = ['AT (UTC)', 'LOCAL', 'OFFSET', 'NOTE'];
    const widths = head.map((h, i) => Math.max(h.length, ...rows.map((r) => r[i]!.length)));
    for (const r of [head, ...rows])
      out.push(
        r
          .map((c, i) => c.padEnd(widths[i]!))
          .join('  ')
          .trimEnd(),
      );
    print(`${out.join('\n')}\n`);
  });
}

function note(f: Preview['fires'][number]): string {
  const parts: string[] = [];
  if (f.dstDay) parts.push('DST day');
  if (f.dst) parts.push(NOTES[f.dst]);
  if (f.paused) parts.push('paused');
  return parts.join('; ');
}
