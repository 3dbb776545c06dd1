import { fileURLToPath } from 'node:url';
import { EventedChild, fixtureArgv } from './evented-child.js';
import type { ReplicaProcessConfig } from '../fixtures/replica-process.js';

const fixture = fileURLToPath(new URL('../fixtures/replica-process.ts', import.meta.url));

export interface ReplicaEvent {
  t: number;
  event: string;
  [key: string]: unknown;
}

/** A cronwarden replica child process (test/fixtures/replica-process.ts). */
export class ReplicaChild extends EventedChild<ReplicaEvent> {
  constructor(readonly config: ReplicaProcessConfig) {
    super(config.replicaId, fixtureArgv(fixture, config));
  }

  get role(): string | undefined {
    return [...this.events].reverse().find((e) => e.event === 'role')?.role as string | undefined;
  }
}

/** The replica currently leading, by the events they printed (waits up to timeoutMs). */
export async function waitForLeader(
  replicas: ReplicaChild[],
  timeoutMs: number,
  exclude: ReplicaChild[] = [],
): Promise<ReplicaChild> {
  const deadline = Date.now() + timeoutMs;
  while (Date.now() < deadline) {
    const leader = replicas.find((r) => !exclude.includes(r) && r.role === 'leader');
    if (leader) return leader;
    await new Promise((r) => setTimeout(r, 50));
  }
  throw new Error(`no leader within ${timeoutMs} ms`);
}
