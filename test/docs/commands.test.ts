/**
 * Every `cronwarden <command>` the docs show, every flag given to it, and every flag named on its
 * own (`--admin-port 0`) exists in the CLI that src/cli/main.ts builds; every `npm run <script>`
 * exists in package.json; every `npm i` installs the tarball `npm pack` writes or a package this
 * project installs itself (test/package/pack-install.test.ts runs the tarball route as written).
 * A cheap check that keeps the command lines in the docs honest.
 */
import { before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import type { CliNode } from './cli-tree.js';
import { codeBlocks, docFiles, inlineCode, prose, repoRoot } from './markdown.js';

interface Mention {
  at: string;
  text: string;
  /** The whole line it is on. */
  line: string;
}

const SHELL_LANGS = new Set(['sh', 'bash', 'shell', 'console', 'text', '']);

/** Command lines from shell blocks (continuations joined) and inline code spans, with where. */
function mentions(): Mention[] {
  const found: Mention[] = [];
  for (const file of docFiles()) {
    for (const b of codeBlocks(file).filter((x) => SHELL_LANGS.has(x.lang))) {
      b.code
        .replace(/\\\n\s*/g, ' ')
        .split('\n')
        .forEach((text, i) => found.push({ at: `${file}:${b.line + i}`, text, line: text }));
    }
    prose(file)
      .split('\n')
      .forEach((line, i) => {
        for (const span of inlineCode(line)) found.push({ at: `${file}:${i + 1}`, text: span, line });
      });
  }
  return found;
}

/**
 * The arguments of each `cronwarden` command a line runs: in command position (at the start, or
 * after `&&`, `;`, `|`, `$(` or a backtick), after any `$ ` prompt, `VAR=value` assignments, `exec`,
 * `npx`, or `node [node flags] …/cronwarden.js`; up to the next separator or comment. So
 * `kubectl create secret generic cronwarden` or `--systems cronwarden` are not read as commands.
 */
function invocations(text: string): string[][] {
  const out: string[][] = [];
  const quoted = text.replace(/'[^']*'|"[^"]*"/g, 'X');
  for (const segment of quoted.split(/&&|\|\||;|\||\$\(|`|\)/)) {
    const command = segment
      .replace(/(^|\s)#.*$/, '')
      .replace(/^\s*\$\s+/, '')
      .replace(/^\s*(?:\w+=\S*\s+)*/, '')
      .replace(/^(?:exec|npx)\s+/, '')
      .replace(/^node\s+(?:--[\w-]+(?:[= ](?!\S*cronwarden\.js)\S+)?\s+)*\S*\/cronwarden\.js(?=\s|$)/, 'cronwarden');
    const m = /^cronwarden\s+(.*)$/.exec(command.trim());
    if (!m) continue;
    const args = m[1]!.trim().split(/\s+/).filter(Boolean);
    // Placeholders (`cronwarden <command> --help`, `npx cronwarden …`) name no command.
    if (args.length > 0 && !/^[<…]/.test(args[0]!)) out.push(args);
  }
  return out;
}

let cli: CliNode;
before(() => {
  cli = JSON.parse(
    execFileSync(process.execPath, ['--import', 'tsx', join(repoRoot, 'test/docs/cli-tree.ts')], {
      cwd: repoRoot,
      encoding: 'utf8',
    }),
  ) as CliNode;
});

/** What is wrong with one invocation's arguments, if anything. */
function check(args: string[]): string | undefined {
  let node = cli;
  let i = 0;
  while (i < args.length && node.commands.length > 0 && !args[i]!.startsWith('-')) {
    const next = node.commands.find((c) => c.name === args[i]);
    if (!next) return `no command "${[...pathOf(node), args[i]].join(' ')}"`;
    node = next;
    i++;
  }
  // Usage notation: `[--json]`, `(--url)`.
  for (const arg of args.slice(i).map((a) => a.replace(/^[[(]+|[\])]+$/g, ''))) {
    if (!arg.startsWith('--')) continue;
    const flag = arg.split('=')[0]!;
    if (!node.options.includes(flag) && !(node === cli && flag === '--version'))
      return `"${pathOf(node).join(' ')}" has no option ${flag}`;
  }
  return undefined;
}

const parents = new Map<CliNode, CliNode>();
function pathOf(node: CliNode): string[] {
  const p = parents.get(node);
  return p ? [...pathOf(p), node.name] : [node.name];
}

/** The options the benchmarks parse (`npm run bench -- kill-leader --kill-every 20`). */
function benchFlags(): string[] {
  return readdirSync(join(repoRoot, 'bench'))
    .filter((f) => f.endsWith('.ts'))
    .flatMap((f) => {
      const text = readFileSync(join(repoRoot, 'bench', f), 'utf8');
      // parseArgs options (`'kill-every': { type: 'string' …`) and the benches' flag('runs', …) reader
      return [
        ...text.matchAll(/^\s*'?([a-z][a-z-]*)'?: \{ type: '(?:string|boolean)'/gm),
        ...text.matchAll(/\bflag\('([a-z][a-z-]*)'/g),
      ];
    })
    .map((m) => `--${m[1]}`);
}

function allFlags(node: CliNode): string[] {
  return [...node.options, ...node.commands.flatMap(allFlags)];
}

describe('command lines in the docs', () => {
  before(() => {
    const link = (n: CliNode) => n.commands.forEach((c) => (parents.set(c, n), link(c)));
    link(cli);
  });

  it('name only commands and options the cronwarden CLI has', () => {
    const problems: string[] = [];
    let count = 0;
    for (const m of mentions()) {
      for (const args of invocations(m.text)) {
        if (args.length === 0) continue;
        count++;
        const problem = check(args);
        if (problem) problems.push(`${m.at}: ${problem}: ${m.text.trim()}`);
      }
    }
    process.stdout.write(`# docs: ${count} cronwarden command lines checked\n`);
    assert.ok(count >= 30, `only ${count} command lines found`);
    assert.deepEqual(problems, [], `\n${problems.join('\n')}`);
  });

  it('name only flags the CLI, node or a benchmark has when they stand alone (`--admin-port 0`)', () => {
    const flags = new Set([...allFlags(cli), ...benchFlags()]);
    const problems: string[] = [];
    for (const m of mentions()) {
      const standalone = /^(--[a-z][a-z0-9-]*)(?:[ =]\S+)?$/.exec(m.text);
      const flag = standalone?.[1];
      if (flag && !flags.has(flag) && !process.allowedNodeEnvironmentFlags.has(flag))
        problems.push(`${m.at}: no option ${flag} of cronwarden, node or a benchmark`);
    }
    assert.deepEqual(problems, [], `\n${problems.join('\n')}`);
  });

  it('run only npm scripts package.json defines', () => {
    const scripts = Object.keys(
      (JSON.parse(readFileSync(join(repoRoot, 'package.json'), 'utf8')) as { scripts: Record<string, string> }).scripts,
    );
    const problems: string[] = [];
    for (const m of mentions()) {
      for (const s of m.text.matchAll(/\bnpm run ([\w:-]+)/g))
        if (!scripts.includes(s[1]!)) problems.push(`${m.at}: no npm script "${s[1]}"`);
    }
    assert.deepEqual(problems, [], `\n${problems.join('\n')}`);
  });

  it('install only the tarball npm pack writes or packages package.json names; `npm i cronwarden` only as a 404', () => {
    const pkg = JSON.parse(readFileSync(join(repoRoot, 'package.json'), 'utf8')) as Record<'name' | 'version', string> &
      Partial<Record<'dependencies' | 'peerDependencies' | 'devDependencies', Record<string, string>>>;
    const known = new Set(
      [pkg.dependencies, pkg.peerDependencies, pkg.devDependencies].flatMap((d) => Object.keys(d ?? {})),
    );
    const tarball = `${pkg.name}-${pkg.version}.tgz`;
    const problems: string[] = [];
    let count = 0;
    for (const m of mentions()) {
      for (const s of m.text.matchAll(/\bnpm (?:i|install)\b([^&;|#]*)/g)) {
        const args = s[1]!.trim().split(/\s+/);
        for (const arg of args.filter((a) => a && !a.startsWith('-'))) {
          count++;
          if (arg.endsWith('.tgz')) {
            if (arg.split('/').at(-1) !== tarball) problems.push(`${m.at}: ${arg} is not the tarball (${tarball})`);
          } else if (arg === pkg.name) {
            // Not on the registry yet: the docs may say so, never ask you to run it.
            if (!/answers 404/.test(m.line)) problems.push(`${m.at}: \`npm i ${arg}\` answers 404`);
          } else if (!known.has(arg)) problems.push(`${m.at}: ${arg} is not a package package.json names`);
        }
      }
    }
    assert.ok(count >= 10, `only ${count} packages to install found`);
    assert.deepEqual(problems, [], `\n${problems.join('\n')}`);
  });
});
