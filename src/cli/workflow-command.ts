/**
 * Workflows from the command line, through the admin JSON API: the workflows defined, a workflow
 * run's graph as text (also under `cronwarden run ID`), and an operator's hand on a run: cancel,
 * signal. `cronwarden retry ID` resumes a failed workflow run from its failed steps.
 */
import type { Command } from 'commander';
import { InvalidArgumentError } from '../errors.js';
import { AdminRequestError, type AdminClient } from '../admin/client.js';
import type { WorkflowRunView } from '../ledger/workflow-reads.js';
import { adminOptions, clientFrom } from './control-command.js';
import { table } from './status-command.js';
import { print } from './terminal-text.js';

type Opts = { url: string; timeoutMs: string; json?: boolean };

/** A run id as the API takes it, or a usage error (exit 2) before any request. */
function runIdArg(id: string): string {
  if (!/^[1-9][0-9]{0,18}$/.test(id)) throw new InvalidArgumentError(`run id "${id.slice(0, 40)}" must be digits`);
  return id;
}

export function registerWorkflows(program: Command): void {
  adminOptions(program.command('workflows').description('list the workflows the replicas define, with their steps'))
    .option('--json', 'print the raw JSON')
    .action(async (opts: Opts) => {
      const { jobs } = await clientFrom(opts).get<{
        jobs: {
          name: string;
          schedule: string;
          timezone: string;
          nextFireAt: string | null;
          workflow?: { steps: { name: string; needs: string[]; mapped: boolean }[] };
        }[];
      }>('/api/jobs');
      const workflows = jobs.filter((j) => j.workflow);
      if (opts.json) return void print(`${JSON.stringify(workflows, null, 2)}\n`);
      const out = table(
        ['WORKFLOW', 'SCHEDULE', 'ZONE', 'NEXT FIRE', 'STEPS'],
        workflows.map((w) => [
          w.name,
          w.schedule,
          w.timezone,
          w.nextFireAt ?? '-',
          w
            .workflow!.steps.map(
              (s) => `${s.name}${s.mapped ? '[]' : ''}${s.needs.length ? `<-${s.needs.join('+')}` : ''}`,
            )
            .join(' '),
        ]),
      );
      print(`${out.join('\n')}\n`);
    });

  adminOptions(
    program
      .command('cancel')
      .argument('<id>', 'run id (a workflow run, or a job run)')
      .description(
        'cancel an active run: a workflow run with every step not finished (their late commits are refused)',
      ),
  )
    .option('--reason <text>', 'why (kept in the ledger)')
    .action(async (id: string, opts: Opts & { reason?: string }) => {
      const { via } = await clientFrom(opts).mutate(
        `/api/runs/${runIdArg(id)}/cancel`,
        opts.reason === undefined ? undefined : { reason: opts.reason },
      );
      print(`run ${id} cancelled (${via})\n`);
    });

  adminOptions(
    program
      .command('signal')
      .argument('<id>', 'workflow run id')
      .argument('<name>', 'signal name (a step may wait for it: waitFor.signal)')
      .description('send a workflow run a signal; the first of a name counts'),
  )
    .option('--data <json>', 'JSON the waiting step receives as ctx.received.data')
    .option('--by <name>', 'who sends it (kept in the ledger)', process.env.USER)
    .action(async (id: string, name: string, opts: Opts & { data?: string; by?: string }) => {
      let data: unknown = null;
      if (opts.data !== undefined) {
        try {
          data = JSON.parse(opts.data);
        } catch {
          throw new InvalidArgumentError('--data must be JSON, e.g. --data \'{"approved": true}\'');
        }
      }
      const { body } = await clientFrom(opts).mutate<{ accepted: boolean; started: number }>(
        `/api/runs/${runIdArg(id)}/signal/${encodeURIComponent(name)}`,
        { data, ...(opts.by ? { by: opts.by } : {}) },
      );
      print(
        body.accepted
          ? `signal "${name}" sent to run ${id}; ${body.started} step run(s) started\n`
          : `run ${id} had a signal "${name}" already; the first one counts\n`,
      );
    });
}

/** A workflow run's view, or undefined when run `id` is no started workflow run. */
export async function workflowView(client: AdminClient, id: string): Promise<WorkflowRunView | undefined> {
  try {
    return await client.get<WorkflowRunView>(`/api/runs/${runIdArg(id)}/workflow`);
  } catch (err) {
    if (err instanceof AdminRequestError && err.status === 404) return undefined;
    throw err;
  }
}

/** A workflow run's graph as text: one line per step in definition order, with what it needs and its runs. */
export function workflowText(view: WorkflowRunView): string[] {
  const out = [`workflow  ${view.workflow} (definition ${view.definition ?? '-'})  ${view.state}`];
  if (view.error) out.push(`error     ${view.error}`);
  out.push('');
  const runs = (s: WorkflowRunView['steps'][number]) => {
    if (s.runs.length === 0) return '';
    const done = s.runs.filter((r) => r.state === 'completed').length;
    return s.mapped ? `${done}/${s.runs.length} items done` : `run ${s.runs[0]!.id} ${s.runs[0]!.state}`;
  };
  out.push(
    ...table(
      ['STEP', 'NEEDS', 'STATE', 'RUNS', 'WAITS / REASON'],
      view.steps.map((s) => [
        `${s.mapped ? '⋔ ' : ''}${s.name}`,
        s.needs.join(', ') || '-',
        s.state,
        runs(s) || '-',
        s.reason ?? (s.waitsFor ? `signal "${s.waitsFor}" until ${s.timeoutAt ?? '-'}` : ''),
      ]),
    ),
  );
  if (view.signals.length > 0)
    out.push('', ...view.signals.map((g) => `signal "${g.name}" from ${g.sentBy} at ${g.sentAt}`));
  return out;
}
