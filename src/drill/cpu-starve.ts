/**
 * The drill's cpu-starve fault: busy-loop child processes on the host beside the replicas, so the
 * replicas' timers, lease renewals and fires compete for the CPU as on an overloaded machine.
 * Hand-written (a node child spinning in a loop): stress-ng does the same but is one more system
 * package to install, and nothing here needs more than "keep every core busy".
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { availableParallelism } from 'node:os';

export class CpuStarvation {
  private constructor(private readonly children: ChildProcess[]) {}

  /** `perCore` spinning processes per core (2 by default: a load average of about 3x the cores with the replicas). */
  static start(perCore = 2): CpuStarvation {
    const n = Math.max(1, availableParallelism() * perCore);
    const children = Array.from({ length: n }, () =>
      spawn(process.execPath, ['-e', 'for (;;) {}'], { stdio: 'ignore' }),
    );
    return new CpuStarvation(children);
  }

  get count(): number {
    return this.children.length;
  }

  async stop(): Promise<void> {
    await Promise.all(
      this.children.map(
        (c) =>
          new Promise<void>((resolve) => {
            if (c.exitCode !== null || c.signalCode !== null) return resolve();
            c.once('exit', () => resolve());
            c.kill('SIGKILL');
          }),
      ),
    );
  }
}
