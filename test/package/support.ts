/**
 * The package as a consumer gets it: `npm pack` (its prepack runs `npm run build`) of a copy of
 * this checkout, so the checkout's own dist/ is left alone, and a small process wrapper for
 * commands read out of the deploy files.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { cpSync, mkdirSync, mkdtempSync, readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';

export const repoRoot = fileURLToPath(new URL('../../', import.meta.url));

/** What a finished command printed, and how it ended. */
export interface CommandResult {
  code: number | null;
  signal: NodeJS.Signals | null;
  stdout: string;
  stderr: string;
}

/** Run a command to its end (no shell); rejects only if it cannot be started or runs past timeoutMs. */
export function run(
  command: string,
  args: string[],
  options: { cwd: string; env?: NodeJS.ProcessEnv; timeoutMs?: number },
): Promise<CommandResult> {
  return new Promise((resolve, reject) => {
    const child = spawn(command, args, {
      cwd: options.cwd,
      env: options.env ?? process.env,
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (d: Buffer) => (stdout += d.toString()));
    child.stderr.on('data', (d: Buffer) => (stderr += d.toString()));
    const timer = setTimeout(() => {
      child.kill('SIGKILL');
      reject(
        new Error(`${command} ${args.join(' ')} ran past ${options.timeoutMs} ms; stderr: ${stderr.slice(-2000)}`),
      );
    }, options.timeoutMs ?? 300_000);
    child.once('error', (err) => {
      clearTimeout(timer);
      reject(err);
    });
    child.once('close', (code, signal) => {
      clearTimeout(timer);
      resolve({ code, signal, stdout, stderr });
    });
  });
}

/** A fresh directory under the checkout's .tmp/ (git-ignored), so packages resolve up to our node_modules. */
export function scratchDirInRepo(prefix: string): string {
  mkdirSync(join(repoRoot, '.tmp'), { recursive: true });
  return mkdtempSync(join(repoRoot, '.tmp', `${prefix}-`));
}

/** The files `npm pack` needs to build and pack: the package's own sources, no tests. */
export const PACK_INPUTS = [
  'package.json',
  'README.md',
  'LICENSE',
  'tsconfig.json',
  'tsconfig.build.json',
  'src',
  'bin',
  'migrations',
  'scripts/copy-assets.mjs',
];

export interface Packed {
  /** The scratch directory holding the copy and the tarball (remove it when done). */
  dir: string;
  /** Absolute path of the .tgz. */
  tarball: string;
  /** Paths inside the package, as npm pack lists them. */
  files: string[];
}

/** `npm pack` a copy of the checkout into a new directory (prepack builds dist/ in the copy). */
export async function packPackage(timeoutMs = 180_000): Promise<Packed> {
  const work = scratchDirInRepo('pack');
  const copy = join(work, 'cronwarden');
  for (const input of PACK_INPUTS) cpSync(join(repoRoot, input), join(copy, input), { recursive: true });
  const out = join(work, 'out');
  mkdirSync(out);
  const r = await run('npm', ['pack', '--json', '--pack-destination', out], { cwd: copy, timeoutMs });
  if (r.code !== 0) throw new Error(`npm pack failed (${r.code}): ${r.stderr.slice(-3000)}`);
  const report = JSON.parse(r.stdout.slice(r.stdout.indexOf('['))) as { filename: string; files: { path: string }[] }[];
  const tarballs = readdirSync(out);
  if (tarballs.length !== 1) throw new Error(`npm pack wrote ${tarballs.join(', ')}`);
  return { dir: work, tarball: join(out, tarballs[0]!), files: report[0]!.files.map((f) => f.path) };
}

/** Unpack a tarball made by npm pack (its root is `package/`) into dir. */
export async function unpack(tarball: string, dir: string): Promise<void> {
  mkdirSync(dir, { recursive: true });
  const r = await run('tar', ['-xzf', tarball, '-C', dir, '--strip-components=1'], { cwd: dir });
  if (r.code !== 0) throw new Error(`tar failed: ${r.stderr}`);
}

export type LogLine = Record<string, unknown> & { msg?: string; time?: number };

/**
 * A long-running process started exactly as given (argv[0] looked up on env.PATH, no shell),
 * its stdout kept as JSON lines (pino logs).
 */
export class LoggedProcess {
  readonly lines: LogLine[] = [];
  readonly child: ChildProcess;
  readonly exited: Promise<{ code: number | null; signal: NodeJS.Signals | null }>;
  stderr = '';
  private waiters = new Set<() => void>();
  private closed = false;

  constructor(
    readonly name: string,
    argv: string[],
    options: { cwd: string; env: NodeJS.ProcessEnv },
  ) {
    this.child = spawn(argv[0]!, argv.slice(1), {
      cwd: options.cwd,
      env: options.env,
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    this.child.stderr!.on('data', (d: Buffer) => (this.stderr += d.toString()));
    this.exited = new Promise((resolve) => this.child.once('exit', (code, signal) => resolve({ code, signal })));
    createInterface({ input: this.child.stdout! }).on('line', (line) => {
      try {
        this.lines.push(JSON.parse(line) as LogLine);
      } catch {
        return;
      }
      this.wake();
    });
    this.child.once('close', () => {
      this.closed = true;
      this.wake();
    });
  }

  /** The first log line with this message (and matching `where`), waiting up to timeoutMs. */
  async waitFor(msg: string, timeoutMs: number): Promise<LogLine> {
    const deadline = Date.now() + timeoutMs;
    for (;;) {
      const line = this.lines.find((l) => l.msg === msg);
      if (line) return line;
      const left = deadline - Date.now();
      if (left <= 0 || this.closed) {
        throw new Error(
          `${this.name}: no "${msg}" ${this.closed ? 'before it exited' : `within ${timeoutMs} ms`}; stderr: ${this.stderr.slice(-1500)}; last logs: ${JSON.stringify(this.lines.slice(-4))}`,
        );
      }
      await new Promise<void>((resolve) => {
        const wake = () => {
          clearTimeout(timer);
          this.waiters.delete(wake);
          resolve();
        };
        const timer = setTimeout(wake, left);
        this.waiters.add(wake);
      });
    }
  }

  /** SIGKILL if still running (test clean-up). */
  async kill(): Promise<void> {
    if (this.child.exitCode === null && this.child.signalCode === null) this.child.kill('SIGKILL');
    await this.exited;
  }

  private wake(): void {
    for (const w of [...this.waiters]) w();
  }
}

/** Pids of live processes whose environment holds `name=value` (Linux /proc; our own user's only). */
export function processesWithEnv(name: string, value: string): number[] {
  const needle = `${name}=${value}`;
  const found: number[] = [];
  for (const entry of readdirSync('/proc')) {
    if (!/^\d+$/.test(entry)) continue;
    let environ: string;
    try {
      environ = readFileSync(`/proc/${entry}/environ`, 'latin1');
    } catch {
      continue; // gone, or another user's
    }
    if (environ.split('\0').includes(needle)) found.push(Number(entry));
  }
  return found;
}
