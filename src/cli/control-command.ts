import { userInfo } from 'node:os';
import type { Command } from 'commander';
import { AdminClient, parseAdminUrl } from '../admin/client.js';
import { InvalidConfigError } from '../errors.js';
import { print } from './terminal-text.js';

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
    user: localUser(),
  });
}

/** The local user name, sent with mutations so a pause records who asked; none if unknown. */
function localUser(): string | undefined {
  try {
    const name = userInfo().username;
    return /^[A-Za-z0-9._@-]{1,64}$/.test(name) ? name : undefined;
  } catch {
    return undefined; // no passwd entry (some containers): the pause is recorded as "admin"
  }
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
      print(`triggered ${job}: run ${body.runId} at ${body.scheduledAt} (leader ${body.leader}, ${via})\n`);
    });

  registerPause(program);

  adminOptions(
    program.command('resume').argument('<job>', 'job name').description('fire a paused job on schedule again'),
  )
    .addHelpText('after', tokenHelp)
    .action(async (job: string, opts: { url: string; timeoutMs: string }) => {
      await clientFrom(opts).mutate(`/api/jobs/${encodeURIComponent(job)}/resume`);
      print(`${job}: resumed\n`);
    });

  adminOptions(
    program.command('resign').description('make the leader give up its lease now; another replica takes over'),
  )
    .addHelpText('after', tokenHelp)
    .action(async (opts: { url: string; timeoutMs: string }) => {
      const { body } = await clientFrom(opts).mutate<{ replicaId: string; token: string }>('/api/resign');
      print(`${body.replicaId} resigned (token ${body.token})\n`);
    });
}

interface PauseAnswer {
  pausedBy: string | null;
  pausedReason: string | null;
  pausedUntil: string | null;
}

function registerPause(program: Command): void {
  adminOptions(
    program
      .command('pause')
      .argument('<job>', 'job name')
      .description('stop firing a job on schedule (manual triggers still run), optionally until an instant')
      .option('--reason <text>', 'why (shown by status and the API; at most 500 characters)')
      .option(
        '--until <iso>',
        'resume by itself at this instant, e.g. 2026-12-01T09:00:00Z; slots at or after it fire',
      ),
  )
    .addHelpText('after', tokenHelp)
    .action(async (job: string, opts: { url: string; timeoutMs: string; reason?: string; until?: string }) => {
      const { body } = await clientFrom(opts).mutate<PauseAnswer>(`/api/jobs/${encodeURIComponent(job)}/pause`, {
        ...(opts.reason === undefined ? {} : { reason: opts.reason }),
        ...(opts.until === undefined ? {} : { until: opts.until }),
      });
      const until = body.pausedUntil ? ` until ${body.pausedUntil}` : ' until resumed';
      const why = body.pausedReason ? `: ${body.pausedReason}` : '';
      print(`${job}: paused by ${body.pausedBy ?? 'admin'}${until}${why}\n`);
    });
}
