import type { Command } from 'commander';
import { AdminClient, parseAdminUrl } from '../admin/client.js';
import { InvalidConfigError } from '../errors.js';

/** --url / --timeout-ms shared by every command that talks to a replica's admin HTTP. */
export function adminOptions(cmd: Command): Command {
  return cmd
    .option(
      '--url <url>',
      'admin URL of any replica (env CRONWARDEN_ADMIN_URL)',
      process.env.CRONWARDEN_ADMIN_URL ?? 'http://127.0.0.1:8080',
    )
    .option('--timeout-ms <ms>', 'request timeout', '5000');
}

export function clientFrom(opts: { url: string; timeoutMs: string }): AdminClient {
  try {
    parseAdminUrl(opts.url);
  } catch (err) {
    throw new InvalidConfigError('--url (env CRONWARDEN_ADMIN_URL)', (err as Error).message);
  }
  return new AdminClient({
    url: opts.url,
    token: process.env.CRONWARDEN_ADMIN_TOKEN || undefined,
    timeoutMs: Number(opts.timeoutMs) || 5000,
  });
}

const tokenHelp =
  "\nNeeds the admin bearer token in CRONWARDEN_ADMIN_TOKEN. Any replica may be addressed: a follower answers\n409 with the leader's admin URL and the command follows it.";

/** trigger / pause / resume / resign. */
export function registerControl(program: Command): void {
  adminOptions(
    program
      .command('trigger')
      .argument('<job>', 'job name')
      .description('fire a job now (a manual run), through the leader'),
  )
    .addHelpText('after', tokenHelp)
    .action(async (job: string, opts: { url: string; timeoutMs: string }) => {
      const { body, via } = await clientFrom(opts).mutate<{ runId: string; scheduledAt: string; leader: string }>(
        `/api/jobs/${encodeURIComponent(job)}/trigger`,
      );
      process.stdout.write(
        `triggered ${job}: run ${body.runId} at ${body.scheduledAt} (leader ${body.leader}, ${via})\n`,
      );
    });

  for (const action of ['pause', 'resume'] as const) {
    adminOptions(
      program
        .command(action)
        .argument('<job>', 'job name')
        .description(
          action === 'pause'
            ? 'stop firing a job on schedule (manual triggers still run)'
            : 'fire a paused job on schedule again',
        ),
    )
      .addHelpText('after', tokenHelp)
      .action(async (job: string, opts: { url: string; timeoutMs: string }) => {
        await clientFrom(opts).mutate(`/api/jobs/${encodeURIComponent(job)}/${action}`);
        process.stdout.write(`${job}: ${action === 'pause' ? 'paused' : 'resumed'}\n`);
      });
  }

  adminOptions(
    program.command('resign').description('make the leader give up its lease now; another replica takes over'),
  )
    .addHelpText('after', tokenHelp)
    .action(async (opts: { url: string; timeoutMs: string }) => {
      const { body } = await clientFrom(opts).mutate<{ replicaId: string; token: string }>('/api/resign');
      process.stdout.write(`${body.replicaId} resigned (token ${body.token})\n`);
    });
}
