import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync, rmSync, openSync, closeSync, readFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { DrillError, ServerNotReadyError } from '../../errors.js';

export interface ServerSpec {
  /** Short label for logs and errors: "redis", "etcd-1", "postgres". */
  label: string;
  command: string;
  args: string[];
  env?: NodeJS.ProcessEnv;
  /** Resolves once the server accepts requests; rejects or times out otherwise. */
  ready: () => Promise<void>;
  readyTimeoutMs?: number;
}

const live = new Set<ServerProcess>();
process.once('exit', () => {
  for (const s of live) s.child?.kill('SIGKILL');
});

/**
 * A throwaway server as a child process, so a test can kill, pause and restart it without touching
 * the machine's shared services. Output goes to a log file whose tail is quoted when start fails.
 */
export class ServerProcess {
  child: ChildProcess | undefined;
  private exited: Promise<void> = Promise.resolve();
  private readonly logPath: string;

  constructor(
    private readonly spec: ServerSpec,
    readonly dir: string,
  ) {
    this.logPath = join(dir, `${spec.label}.log`);
  }

  get pid(): number | undefined {
    return this.child?.pid;
  }

  get running(): boolean {
    return this.child !== undefined && this.child.exitCode === null && this.child.signalCode === null;
  }

  async start(): Promise<void> {
    if (this.running) return;
    const out = openSync(this.logPath, 'a');
    const child = spawn(this.spec.command, this.spec.args, {
      env: { ...process.env, ...this.spec.env },
      stdio: ['ignore', out, out],
    });
    closeSync(out);
    this.child = child;
    live.add(this);
    this.exited = new Promise((resolve) => child.once('exit', () => resolve()));
    const spawnError = new Promise<never>((_, reject) => child.once('error', reject));
    const died = this.exited.then(() => {
      throw new DrillError(`${this.spec.label} exited during start-up:\n${this.logTail()}`);
    });
    const timeoutMs = this.spec.readyTimeoutMs ?? 20_000;
    let timer: NodeJS.Timeout | undefined;
    const timeout = new Promise<never>((_, reject) => {
      timer = setTimeout(
        () => reject(new ServerNotReadyError(this.spec.label, `no answer after ${timeoutMs} ms:\n${this.logTail()}`)),
        timeoutMs,
      );
    });
    try {
      await Promise.race([this.pollReady(), died, spawnError, timeout]);
    } catch (err) {
      child.kill('SIGKILL');
      throw err;
    } finally {
      clearTimeout(timer);
    }
  }

  private async pollReady(): Promise<void> {
    for (;;) {
      if (!this.running) return new Promise(() => {}); // `died` reports it
      try {
        await this.spec.ready();
        return;
      } catch {
        await new Promise((r) => setTimeout(r, 50));
      }
    }
  }

  /** Graceful stop (SIGTERM), waiting for exit. */
  async stop(): Promise<void> {
    await this.signalAndWait('SIGTERM');
  }

  /** Abrupt stop (SIGKILL): no shutdown work, no flush. */
  async kill(): Promise<void> {
    await this.signalAndWait('SIGKILL');
  }

  pause(): void {
    this.child?.kill('SIGSTOP');
  }

  resume(): void {
    this.child?.kill('SIGCONT');
  }

  /** Stop (gracefully unless told otherwise) and start again with the same data directory. */
  async restart(how: 'stop' | 'kill' = 'stop'): Promise<void> {
    await (how === 'kill' ? this.kill() : this.stop());
    await this.start();
  }

  logTail(lines = 30): string {
    try {
      return readFileSync(this.logPath, 'utf8').split('\n').slice(-lines).join('\n');
    } catch {
      return '(no log)';
    }
  }

  private async signalAndWait(signal: NodeJS.Signals): Promise<void> {
    if (!this.running) return;
    this.child!.kill('SIGCONT'); // a paused process cannot act on SIGTERM
    this.child!.kill(signal);
    await this.exited;
    live.delete(this);
  }
}

/** A fresh scratch directory for a server's data; removed by `removeDir`. */
export function scratchDir(prefix: string): string {
  return mkdtempSync(join(tmpdir(), `cronwarden-${prefix}-`));
}

export function removeDir(dir: string): void {
  rmSync(dir, { recursive: true, force: true });
}
