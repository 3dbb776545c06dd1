import type { Command } from 'commander';
import { InvalidArgumentError } from '../errors.js';
import { fireTriggers } from '../cron/fire-trigger.js';
import { adminOptions, clientFrom } from './control-command.js';
import { table } from './status-command.js';
import { print } from './terminal-text.js';
import { workflowText, workflowView } from './workflow-command.js';

interface RunRow {
  id: string;
  job: string;
  scheduledAt: string;
  trigger: string;
  state: string;
  attemptCount: number;
  durationMs: number | null;
  latenessMs: number | null;
  worker: string | null;
  error: string | null;
}
interface Attempt {
  attempt: number;
  token: string;
  worker: string;
  state: string;
  startedAt: string;
  durationMs: number | null;
  error: string | null;
  errorStack: string | null;
}
interface RunDetail extends RunRow {
  idempotencyKey: string;
  leaderToken: string;
  leaderId: string;
  createdAt: string;
  finishedAt: string | null;
  skippedAttempts: number;
  attempts: Attempt[];
}

type Opts = { url: string; timeoutMs: string; json?: boolean };
const ms = (v: number | null) => (v === null ? '-' : `${v} ms`);

/** A run id as the API takes it, or a usage error (exit 2) before any request. */
function runIdArg(id: string): string {
  if (!/^[1-9][0-9]{0,18}$/.test(id)) throw new InvalidArgumentError(`run id "${id.slice(0, 40)}" must be digits`);
  return id;
}

/** runs / run ID / retry ID: the console's run views and its retry, through the admin JSON API. */
export function registerRuns(program: Command): void {
  registerList(program);
  registerShow(program);
  registerRetry(program);
}

function registerList(program: Command): void {
  adminOptions(program.command('runs').description('list runs newest first (by scheduled time), one page'))
    .option('--job <name>', 'only this job')
    .option('--state <state>', 'only runs in this state (pending, running, completed, failed, …)')
    .option('--trigger <trigger>', `only runs fired so: ${fireTriggers.join(', ')}`)
    .option('--limit <n>', 'runs per page (1-500)', '20')
    .option('--cursor <cursor>', 'the page after this one (printed as "next page: --cursor …")')
    .option('--json', 'print the raw JSON')
    .action(async (opts: Opts & { job?: string; state?: string; trigger?: string; limit: string; cursor?: string }) => {
      const q = new URLSearchParams({ limit: opts.limit });
      for (const k of ['job', 'state', 'trigger', 'cursor'] as const) if (opts[k] !== undefined) q.set(k, opts[k]);
      const page = await clientFrom(opts).get<{ runs: RunRow[]; nextCursor: string | null }>(`/api/runs?${q}`);
      if (opts.json) return void print(`${JSON.stringify(page, null, 2)}\n`);
      const out = table(
        ['RUN', 'JOB', 'SCHEDULED', 'TRIGGER', 'STATE', 'ATTEMPTS', 'DURATION', 'LATE', 'WORKER'],
        page.runs.map((r) => [
          r.id,
          r.job,
          r.scheduledAt,
          r.trigger,
          r.state,
          String(r.attemptCount),
          ms(r.durationMs),
          ms(r.latenessMs),
          r.worker ?? '-',
        ]),
      );
      if (page.nextCursor) out.push('', `next page: --cursor ${page.nextCursor}`);
      print(`${out.join('\n')}\n`);
    });
}

function registerShow(program: Command): void {
  adminOptions(program.command('run').argument('<id>', 'run id').description('show one run with every attempt'))
    .option('--json', 'print the raw JSON')
    .action(async (id: string, opts: Opts) => {
      const client = clientFrom(opts);
      const run = await client.get<RunDetail>(`/api/runs/${runIdArg(id)}`);
      // A workflow run: its graph first (its steps are runs of their own, `cronwarden run STEP_RUN`).
      const workflow = await workflowView(client, id);
      if (opts.json) return void print(`${JSON.stringify(workflow ? { ...run, workflow } : run, null, 2)}\n`);
      if (workflow) print(`${workflowText(workflow).join('\n')}\n\n`);
      const out = [
        `run       ${run.id}  ${run.job}  ${run.state}`,
        `scheduled ${run.scheduledAt} (${run.trigger}), committed ${run.createdAt} by ${run.leaderId} token ${run.leaderToken}`,
        `key       ${run.idempotencyKey}`,
        `late      ${ms(run.latenessMs)}   finished ${run.finishedAt ?? '-'}   skipped re-deliveries ${run.skippedAttempts}`,
        ...(run.error ? [`error     ${run.error}`] : []),
        '',
        ...table(
          ['ATTEMPT', 'TOKEN', 'WORKER', 'STARTED', 'DURATION', 'OUTCOME', 'ERROR'],
          run.attempts.map((a) => [
            String(a.attempt),
            a.token,
            a.worker,
            a.startedAt,
            ms(a.durationMs),
            a.state,
            a.error?.split('\n')[0] ?? '',
          ]),
        ),
      ];
      // A stack is a failure's: a superseded attempt (a later slot wrote first) says why in its line.
      const failed = [...run.attempts].reverse().find((a) => a.errorStack && a.state !== 'superseded');
      if (failed) out.push('', `stack of attempt ${failed.attempt}:`, failed.errorStack!);
      print(`${out.join('\n')}\n`);
    });
}

function registerRetry(program: Command): void {
  adminOptions(
    program
      .command('retry')
      .argument('<id>', 'run id')
      .description('run a failed run again: same run id and idempotency key, a new attempt (not for completed runs)'),
  )
    .addHelpText(
      'after',
      "\nNeeds the admin bearer token in CRONWARDEN_ADMIN_TOKEN. Any replica may be addressed: a follower answers\n409 with the leader's admin URL and the command follows it.",
    )
    .action(async (id: string, opts: Opts) => {
      const { body, via } = await clientFrom(opts).mutate<{ job: string; previousState: string; leader: string }>(
        `/api/runs/${runIdArg(id)}/retry`,
      );
      print(`run ${id} (${body.job}) retried from ${body.previousState} (leader ${body.leader}, ${via})\n`);
    });
}
