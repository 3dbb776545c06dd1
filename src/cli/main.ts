import { readFileSync } from 'node:fs';
import { Command, CommanderError } from 'commander';
import { CronwardenError } from '../errors.js';
import { registerDrill } from './drill-command.js';
import { registerMigrate } from './migrate-command.js';
import { registerStart } from './start-command.js';
import { registerStatus } from './status-command.js';
import { registerControl } from './control-command.js';
import { registerRuntime } from './runtime-command.js';
import { registerRuns } from './runs-command.js';
import { registerNext } from './next-command.js';
import { registerExplain } from './explain-command.js';
import { registerWorkflows } from './workflow-command.js';
import { printError, terminalSafe } from './terminal-text.js';
import { envTypos } from '../config/env-typos.js';

/**
 * `cronwarden` command line. Exit codes scripts can rely on:
 * 0 success, 1 runtime failure (backend unreachable, check failed), 2 usage or configuration error.
 * Every error is one line on stderr, `cronwarden: <what went wrong>`; a usage error adds where to
 * look (`(see cronwarden <command> --help)`) on the same line instead of dumping the whole help.
 */
export const EXIT = { ok: 0, failure: 1, usage: 2 } as const;

const version = (
  JSON.parse(readFileSync(new URL('../../package.json', import.meta.url), 'utf8')) as { version: string }
).version;

const program = new Command('cronwarden')
  .description('Exactly-once cron across a cluster: leader election, fencing tokens, BullMQ delivery.')
  .version(version, '-V, --version', 'print the version')
  .exitOverride();

registerMigrate(program);
registerDrill(program);
registerStart(program);
registerStatus(program);
registerControl(program);
registerRuntime(program);
registerRuns(program);
registerNext(program);
registerExplain(program);
registerWorkflows(program);

// Commander's usage errors ("error: unknown option '--x'", sometimes with "(Did you mean …?)" on
// a second line) become one line naming the help to read. Set per command, so the hint names it.
for (const cmd of [program, ...program.commands]) {
  const helpHint = cmd === program ? 'cronwarden --help' : `cronwarden ${cmd.name()} --help`;
  cmd.configureOutput({
    outputError: (str, write) =>
      write(terminalSafe(`cronwarden: ${oneLine(str.replace(/^error: /, ''))} (see ${helpHint})\n`)),
  });
}

/** Collapse a message to one line (stack-less, no embedded newlines). */
function oneLine(text: string): string {
  return text.replace(/\s*\n\s*/g, ' ').trim();
}

/** The one-line message of any thrown value; never empty (pg's AggregateError has no message). */
function messageOf(err: unknown): string {
  if (!(err instanceof Error)) return oneLine(String(err)) || 'unknown error';
  const e = err as Error & { code?: string; errors?: unknown[] };
  const inner = Array.isArray(e.errors) && e.errors[0] instanceof Error ? e.errors[0].message : '';
  return oneLine(e.message || inner || e.code || e.name) || 'unknown error';
}

// A misspelt setting is ignored, so its default silently stays in force: say so before anything else.
for (const { name, nearest } of envTypos(process.env))
  printError(`cronwarden: warning: ${name} is not a cronwarden variable and is ignored; did you mean ${nearest}?\n`);

try {
  await program.parseAsync(process.argv);
} catch (err) {
  if (err instanceof CommanderError) {
    // Already reported by outputError above (or help/version printed, exit code 0).
    process.exit(err.exitCode === 0 ? EXIT.ok : EXIT.usage);
  }
  printError(`cronwarden: ${messageOf(err)}\n`);
  process.exit(err instanceof CronwardenError && !err.retryable ? EXIT.usage : EXIT.failure);
}
