import { spawn, type ChildProcess } from 'node:child_process';
import { createInterface } from 'node:readline';

export type ChildEvent = Record<string, unknown>;

/** argv that runs a test fixture through tsx with one JSON argument. */
export function fixtureArgv(path: string, arg: unknown): string[] {
  return ['--import', 'tsx', path, JSON.stringify(arg)];
}

/**
 * A node process whose stdout is JSON lines (a fixture's events, a replica's pino logs), kept as
 * events that tests can await. Lines that are not JSON are ignored.
 */
export class EventedChild<E extends ChildEvent = ChildEvent> {
  readonly events: E[] = [];
  readonly child: ChildProcess;
  /** Resolves with the exit code once the process has exited. */
  readonly exited: Promise<number | null>;
  /** True once stdout is closed: no further event can arrive. */
  private done = false;
  private cursor = 0;
  private waiters = new Set<() => void>();

  constructor(
    readonly id: string,
    argv: string[],
    options: { env?: NodeJS.ProcessEnv; cwd?: string } = {},
  ) {
    this.child = spawn(process.execPath, argv, {
      env: options.env,
      cwd: options.cwd,
      stdio: ['ignore', 'pipe', 'inherit'],
    });
    this.exited = new Promise((resolve) => this.child.once('exit', (code) => resolve(code)));
    createInterface({ input: this.child.stdout! }).on('line', (line) => {
      try {
        this.events.push(JSON.parse(line) as E);
      } catch {
        return;
      }
      this.wake();
    });
    // 'close' comes after the last stdout data, so a waiter sees every event before giving up.
    this.child.once('close', () => {
      this.done = true;
      this.wake();
    });
  }

  /** A test fixture run through tsx with one JSON argument. */
  static fixture<E extends ChildEvent = ChildEvent>(
    id: string,
    path: string,
    arg: unknown,
    options: { cwd?: string } = {},
  ): EventedChild<E> {
    return new EventedChild<E>(id, fixtureArgv(path, arg), options);
  }

  /**
   * The first event from index `since` on that matches; rejects when time runs out or the child
   * is gone without printing it.
   */
  async waitFor(match: (e: E) => boolean, timeoutMs: number, since = 0): Promise<E> {
    const deadline = Date.now() + timeoutMs;
    for (;;) {
      const index = this.events.findIndex((e, i) => i >= since && match(e));
      if (index >= 0) {
        this.cursor = Math.max(this.cursor, index + 1);
        return this.events[index]!;
      }
      const left = deadline - Date.now();
      if (left <= 0 || this.done) {
        const why = this.done ? 'exited' : `printed nothing matching within ${timeoutMs} ms`;
        throw new Error(`${this.id} ${why}; last events: ${JSON.stringify(this.events.slice(-5))}`);
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

  /** Like waitFor, but only after the last event any wait returned: successive calls walk forward. */
  next(match: (e: E) => boolean, timeoutMs: number): Promise<E> {
    return this.waitFor(match, timeoutMs, this.cursor);
  }

  signal(sig: NodeJS.Signals): void {
    this.child.kill(sig);
  }

  /** SIGKILL (after SIGCONT, in case it is stopped) and wait for the exit; a no-op once exited. */
  async kill(): Promise<void> {
    if (this.child.exitCode === null && this.child.signalCode === null) {
      this.child.kill('SIGCONT');
      this.child.kill('SIGKILL');
    }
    await this.exited;
  }

  private wake(): void {
    for (const w of [...this.waiters]) w();
  }
}
