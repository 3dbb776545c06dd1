/** In-process replicas with their admin servers, sharing one in-memory lease "server". */
import { randomUUID } from 'node:crypto';
import { pino } from 'pino';
import { defineJob } from '../../src/jobs/define-job.js';
import { MemoryLeaseBackend, MemoryLeaseStore } from '../../src/locks/memory.js';
import { Replica } from '../../src/replica/replica.js';
import type { JobDefinition } from '../../src/jobs/define-job.js';
import type { ElectorRole } from '../../src/scheduler/election/elector.js';

export const SHARED_REDIS_URL = process.env.CRONWARDEN_TEST_REDIS_URL ?? 'redis://127.0.0.1:6379';
export const ADMIN_TOKEN = 'test-admin-token-0123456789';

export function testJobs() {
  return [
    defineJob({ name: 'tick', schedule: '*/2 * * * * *', handler: async () => {} }),
    defineJob({ name: 'yearly', schedule: '0 0 1 1 *', timezone: 'Europe/Berlin', handler: async () => {} }),
  ];
}

export interface Node {
  replica: Replica;
  url: string;
  stop(): Promise<void>;
}

export class Cluster {
  readonly store = new MemoryLeaseStore();
  readonly nodes: Node[] = [];

  /** `schema`: where the ledger was migrated; undefined: the namespace's default schema. */
  constructor(
    private readonly databaseUrl: string,
    readonly schema?: string,
    readonly namespace = `adm${randomUUID().slice(0, 8)}`,
    private readonly jobs: () => JobDefinition[] = testJobs,
  ) {}

  async add(id: string): Promise<Node> {
    const backend = new MemoryLeaseBackend({ store: this.store });
    const replica = new Replica({
      replicaId: id,
      namespace: this.namespace,
      schema: this.schema,
      backend,
      databaseUrl: this.databaseUrl,
      redisUrl: SHARED_REDIS_URL,
      jobs: this.jobs(),
      election: { ttlMs: 3000 },
      shutdownGraceMs: 1000,
      // The replica serves the admin HTTP and keeps its member row, as `cronwarden start` does.
      admin: { port: 0, token: ADMIN_TOKEN },
      version: 'test',
      logger: pino({ level: 'silent' }),
    });
    await replica.start();
    const url = replica.adminUrl!;
    let stopped = false;
    const node: Node = {
      replica,
      url,
      stop: async () => {
        if (stopped) return;
        stopped = true;
        await replica.stop();
      },
    };
    this.nodes.push(node);
    return node;
  }

  async stopAll(): Promise<void> {
    await Promise.all(this.nodes.map((n) => n.stop()));
  }
}

/** Resolves when `replica` reaches `role` (at once if it is there already). */
export function waitForRole(replica: Replica, role: ElectorRole, timeoutMs = 10_000): Promise<void> {
  if (replica.role === role) return Promise.resolve();
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => {
      replica.off('role:changed', on);
      reject(new Error(`${replica.replicaId} did not become ${role} within ${timeoutMs} ms (is ${replica.role})`));
    }, timeoutMs);
    const on = (r: ElectorRole) => {
      if (r !== role) return;
      clearTimeout(timer);
      replica.off('role:changed', on);
      resolve();
    };
    replica.on('role:changed', on);
  });
}

/** Resolves with whichever replica becomes leader first. */
export async function firstLeader(replicas: Replica[], timeoutMs = 10_000): Promise<Replica> {
  return Promise.any(replicas.map((r) => waitForRole(r, 'leader', timeoutMs).then(() => r)));
}

export async function json(res: Response): Promise<Record<string, any>> {
  return (await res.json()) as Record<string, any>;
}
