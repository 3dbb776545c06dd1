import { fileURLToPath } from 'node:url';
import { EventedChild, fixtureArgv } from './evented-child.js';
import type { ReplicaProcessConfig } from '../fixtures/replica-process.js';
import type { TestDatabase } from './postgres-database.js';

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

/** The table the replica fixture writes each run's effect into (test/fixtures/replica-process.ts). */
export async function createEffectsTable(db: TestDatabase): Promise<void> {
  await db.pool.query(
    'CREATE TABLE cw_test_effects (run_id bigint NOT NULL, job text NOT NULL, scheduled_at timestamptz NOT NULL, token bigint NOT NULL, replica text NOT NULL)',
  );
}

/**
 * Replica processes r1, r2, … of one deployment on `db` (its schema, the PostgreSQL lease in it
 * unless `backend` says otherwise) and `redisUrl`, each with `config`.
 */
export function replicaProcesses(
  db: TestDatabase,
  o: { namespace: string; redisUrl: string; count?: number } & Omit<
    ReplicaProcessConfig,
    'replicaId' | 'namespace' | 'schema' | 'databaseUrl' | 'redisUrl' | 'backend'
  > &
    Partial<Pick<ReplicaProcessConfig, 'backend'>>,
): ReplicaChild[] {
  const { count = 3, ...config } = o;
  return Array.from(
    { length: count },
    (_, i) =>
      new ReplicaChild({
        backend: { kind: 'postgres', url: db.url },
        ...config,
        replicaId: `r${i + 1}`,
        schema: db.schema,
        databaseUrl: db.url,
      }),
  );
}
