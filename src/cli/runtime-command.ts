import type { Command } from 'commander';
import { AdminRequestError, type AdminClient } from '../admin/client.js';
import { InvalidConfigError } from '../errors.js';
import { BACKFILL_RATE, MAX_BACKFILL_LIMIT, MAX_BACKFILL_RATE } from '../scheduler/firing/backfill.js';
import { adminOptions, clientFrom } from './control-command.js';
import { print, printError } from './terminal-text.js';

type AdminOpts = { url: string; timeoutMs: string };

const tokenHelp = '\nChanges need the admin bearer token in CRONWARDEN_ADMIN_TOKEN.';

interface ScheduleView {
  id: string;
  job: string;
  schedule: string;
  timezone: string;
  paused: boolean;
  version: number;
  nextFireAt: string | null;
  deletedAt: string | null;
  payload: unknown;
}

/** Schedules a page of `schedule list` asks for (the API's most). */
const LIST_PAGE = 5000;

interface SchedulePage {
  schedules: ScheduleView[];
  /** null on the last page; absent from a replica older than paging (its one page is all it gives). */
  nextAfter?: string | null;
}

function json(text: string | undefined, option: string): unknown {
  if (text === undefined) return undefined;
  try {
    return JSON.parse(text);
  } catch {
    throw new InvalidConfigError(option, 'must be JSON, e.g. \'{"customer": 42}\'');
  }
}

function int(text: string | undefined, option: string, range?: { min: number; max: number }): number | undefined {
  if (text === undefined) return undefined;
  const n = Number(text);
  if (!Number.isInteger(n)) throw new InvalidConfigError(option, 'must be a whole number');
  if (range && (n < range.min || n > range.max))
    throw new InvalidConfigError(option, `must be from ${range.min} to ${range.max}`);
  return n;
}

/** The schedule fields given on the command line (only those given: an update changes just them). */
function specOptions(o: Record<string, string | undefined>): Record<string, unknown> {
  const spec: Record<string, unknown> = {
    handler: o.handler,
    schedule: o.cron,
    timezone: o.timezone,
    misfire: o.misfire,
    overlap: o.overlap,
    catchUpWindowMs: int(o.catchUpWindowMs, '--catch-up-window-ms'),
    misfireGraceMs: int(o.misfireGraceMs, '--misfire-grace-ms'),
    payload: json(o.payload, '--payload'),
  };
  return Object.fromEntries(Object.entries(spec).filter(([, v]) => v !== undefined));
}

function line(s: ScheduleView): string {
  const state = s.deletedAt ? 'deleted' : s.paused ? 'paused' : `next ${s.nextFireAt ?? 'never'}`;
  return `${s.id}\t${s.job}\t${s.schedule} (${s.timezone})\tv${s.version}\t${state}`;
}

function withSpec(cmd: Command): Command {
  return cmd
    .option('--handler <job>', 'the job defined in code that runs it')
    .option('--cron <expression>', 'cron expression (the README dialect)')
    .option('--timezone <zone>', 'IANA time zone (default UTC)')
    .option('--misfire <policy>', 'all | latest | skip')
    .option('--overlap <policy>', 'allow | skip | queue | coalesce | replace')
    .option('--catch-up-window-ms <ms>', 'how far back catch-up reaches')
    .option('--misfire-grace-ms <ms>', 'lateness still counted on time')
    .option('--payload <json>', 'JSON handed to the handler as ctx.payload');
}

/** `cronwarden schedule …`: runtime schedules. */
function registerSchedule(program: Command): void {
  const schedule = program.command('schedule').description('runtime schedules: create, update, pause, delete, list');
  withSpec(adminOptions(schedule.command('create').argument('<id>', 'schedule id').description('create a schedule')))
    .addHelpText('after', tokenHelp)
    .action(async (id: string, o: AdminOpts & Record<string, string>) => {
      const { body } = await clientFrom(o).mutate<{ schedule: ScheduleView }>('/api/schedules', {
        id,
        ...specOptions(o),
      });
      print(`created ${line(body.schedule)}\n`);
    });
  withSpec(adminOptions(schedule.command('update').argument('<id>', 'schedule id').description('change a schedule')))
    .addHelpText('after', tokenHelp)
    .action(async (id: string, o: AdminOpts & Record<string, string>) => {
      const path = `/api/schedules/${encodeURIComponent(id)}`;
      const { body } = await clientFrom(o).mutate<{ schedule: ScheduleView }>(path, specOptions(o), 'PATCH');
      print(`updated ${line(body.schedule)}\n`);
    });
  for (const action of ['pause', 'resume', 'delete'] as const) {
    adminOptions(schedule.command(action).argument('<id>', 'schedule id').description(`${action} a schedule`))
      .addHelpText('after', tokenHelp)
      .action(async (id: string, o: AdminOpts) => {
        const path = `/api/schedules/${encodeURIComponent(id)}`;
        const { body } =
          action === 'delete'
            ? await clientFrom(o).mutate<{ schedule: ScheduleView }>(path, undefined, 'DELETE')
            : await clientFrom(o).mutate<{ schedule: ScheduleView }>(`${path}/${action}`);
        print(`${action === 'delete' ? 'deleted' : `${action}d`} ${line(body.schedule)}\n`);
      });
  }
  adminOptions(
    schedule.command('list').description('list every schedule, by id').option('--deleted', 'include deleted ones'),
  )
    .option('--json', 'print JSON')
    .action(async (o: AdminOpts & { deleted?: boolean; json?: boolean }) => {
      const client = clientFrom(o);
      const all: ScheduleView[] = [];
      // The API answers a page at a time: follow nextAfter to the end, printing as pages come.
      for (let after: string | null = ''; after !== null;) {
        const q = new URLSearchParams({ limit: String(LIST_PAGE) });
        if (o.deleted) q.set('deleted', '1');
        if (after) q.set('after', after);
        const page: SchedulePage = await client.get<SchedulePage>(`/api/schedules?${q}`);
        if (o.json) all.push(...page.schedules);
        else for (const s of page.schedules) print(`${line(s)}\n`);
        after = page.nextAfter ?? null;
      }
      if (o.json) print(`${JSON.stringify({ schedules: all }, null, 2)}\n`);
    });
  adminOptions(
    schedule.command('show').argument('<id>', 'schedule id').description('a schedule and its versions'),
  ).action(async (id: string, o: AdminOpts) => {
    const body = await clientFrom(o).get<unknown>(`/api/schedules/${encodeURIComponent(id)}`);
    print(`${JSON.stringify(body, null, 2)}\n`);
  });
}

/** `cronwarden once JOB --key K [--at T] [--payload JSON]`. */
function registerOnce(program: Command): void {
  adminOptions(
    program
      .command('once')
      .argument('<job>', 'job defined in code')
      .requiredOption('--key <key>', 'your key: a second request with it returns the first run')
      .option('--at <instant>', 'ISO 8601 instant (default now)')
      .option('--payload <json>', 'JSON handed to the handler as ctx.payload')
      .description('a one-off run of a job at an instant, once per key, through the leader'),
  )
    .addHelpText('after', tokenHelp)
    .action(async (job: string, o: AdminOpts & { key: string; at?: string; payload?: string }) => {
      const { body } = await clientFrom(o).mutate<{ runId: string; scheduledAt: string; created: boolean }>(
        `/api/jobs/${encodeURIComponent(job)}/once`,
        { key: o.key, at: o.at, payload: json(o.payload, '--payload') },
      );
      const what = body.created ? 'committed' : 'already committed for this key:';
      print(`${job}: ${what} run ${body.runId} at ${body.scheduledAt}\n`);
    });
}

interface Step {
  total: number;
  processed: number;
  inserted: number;
  existing: number;
  next: string | null;
}

/** A bar on one terminal line, redrawn in place; without a TTY, nothing until the summary. */
function progress(done: number, total: number, inserted: number, existing: number): string {
  const width = 30;
  const filled = total === 0 ? width : Math.round((done / total) * width);
  return `\r[${'#'.repeat(filled)}${'-'.repeat(width - filled)}] ${done}/${total} slots, ${inserted} new, ${existing} already in the ledger`;
}

/** Step through the range; a failover in the middle is retried against the next leader. */
async function runBackfill(
  client: AdminClient,
  job: string,
  body: { from: string; to: string; rate: number },
  tty: boolean,
): Promise<{ total: number; inserted: number; existing: number }> {
  let from = body.from;
  const sum = { total: 0, done: 0, inserted: 0, existing: 0 };
  let failures = 0;
  for (;;) {
    let step: Step;
    try {
      ({ body: step } = await client.mutate<Step>(`/api/jobs/${encodeURIComponent(job)}/backfill`, {
        ...body,
        from,
        // Two seconds of slots a step, within what one step may take.
        limit: Math.min(MAX_BACKFILL_LIMIT, body.rate * 2),
      }));
      failures = 0;
    } catch (err) {
      if (!(err instanceof AdminRequestError) || !err.retryable || ++failures > 10) throw err;
      if (tty) printError(`\n${err.message}; trying again\n`);
      await new Promise((r) => setTimeout(r, 1000));
      continue;
    }
    if (sum.total === 0) sum.total = step.total;
    sum.done += step.processed;
    sum.inserted += step.inserted;
    sum.existing += step.existing;
    if (tty) process.stderr.write(progress(sum.done, sum.total, sum.inserted, sum.existing));
    if (!step.next) break;
    from = step.next;
  }
  if (tty) process.stderr.write('\n');
  return sum;
}

/** `cronwarden backfill JOB --from T1 --to T2 [--rate N]`. */
function registerBackfill(program: Command): void {
  adminOptions(
    program
      .command('backfill')
      .argument('<job>', 'a job from code, or a runtime schedule as <handler>/<id>')
      .requiredOption('--from <instant>', 'ISO 8601 instant, start of the range (inclusive)')
      .requiredOption('--to <instant>', 'ISO 8601 instant, end of the range (inclusive, not in the future)')
      .option(
        '--rate <slots-per-second>',
        `at most this many slots a second, 1-${MAX_BACKFILL_RATE} (default ${BACKFILL_RATE})`,
      )
      .description('fire every slot of a job in a past range that the ledger does not hold yet, through the leader'),
  )
    .addHelpText('after', tokenHelp)
    .action(async (job: string, o: AdminOpts & { from: string; to: string; rate?: string }) => {
      const rate = int(o.rate, '--rate', { min: 1, max: MAX_BACKFILL_RATE }) ?? BACKFILL_RATE;
      const client = clientFrom({ ...o, timeoutMs: String(Math.max(Number(o.timeoutMs) || 0, 30_000)) });
      const sum = await runBackfill(client, job, { from: o.from, to: o.to, rate }, process.stderr.isTTY === true);
      print(`${job}: backfilled ${sum.inserted} slot(s); ${sum.existing} of ${sum.total} were already in the ledger\n`);
    });
}

export function registerRuntime(program: Command): void {
  registerSchedule(program);
  registerOnce(program);
  registerBackfill(program);
}
