/**
 * Print the `cronwarden` command tree as JSON: the program src/cli/main.ts builds, read instead of
 * parsed. Run as a process of its own (main.ts parses argv at import): commander's parseAsync is
 * replaced before main.ts is imported, so nothing runs and the tree is exactly the CLI's.
 */
import { Command } from 'commander';

export interface CliNode {
  name: string;
  options: string[];
  commands: CliNode[];
}

function tree(c: Command): CliNode {
  return {
    name: c.name(),
    options: [...c.options.map((o) => o.long).filter((l): l is string => !!l), '--help'],
    commands: c.commands.map(tree),
  };
}

Command.prototype.parseAsync = function (this: Command) {
  process.stdout.write(JSON.stringify(tree(this)));
  process.exit(0);
};

await import('../../src/cli/main.js');
