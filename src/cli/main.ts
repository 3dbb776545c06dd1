import { Command, CommanderError } from 'commander';
import { CronwardenError } from '../errors.js';
import { registerDrill } from './drill-command.js';
import { registerMigrate } from './migrate-command.js';
import { registerStart } from './start-command.js';
import { registerStatus } from './status-command.js';
import { registerControl } from './control-command.js';

/**
 * `cronwarden` command line. Exit codes scripts can rely on:
 * 0 success, 1 runtime failure (backend unreachable, check failed), 2 usage or configuration error.
 */
export const EXIT = { ok: 0, failure: 1, usage: 2 } as const;

const program = new Command('cronwarden')
  .description('Exactly-once cron across a cluster: leader election, fencing tokens, BullMQ delivery.')
  .showHelpAfterError()
  .exitOverride();

registerMigrate(program);
registerDrill(program);
registerStart(program);
registerStatus(program);
registerControl(program);

try {
  await program.parseAsync(process.argv);
} catch (err) {
  if (err instanceof CommanderError) {
    process.exit(err.exitCode === 0 ? EXIT.ok : EXIT.usage);
  }
  const message = err instanceof Error ? err.message : String(err);
  process.stderr.write(`cronwarden: ${message}\n`);
  process.exit(err instanceof CronwardenError && !err.retryable ? EXIT.usage : EXIT.failure);
}
