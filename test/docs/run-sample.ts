/**
 * Run a docs sample or an example as a reader would: `node --import tsx file.ts`, with 'cronwarden'
 * resolved to the sources through examples/tsconfig.json's paths, against a scratch database and
 * a namespace of its own on the shared Redis, both removed afterwards.
 */
import { spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { join } from 'node:path';
import { Redis } from 'ioredis';
import { createTestDatabase } from '../support/postgres-database.js';
import { repoRoot } from './markdown.js';

export const REDIS_URL = process.env.CRONWARDEN_TEST_REDIS_URL ?? 'redis://127.0.0.1:6379';

export interface RunResult {
  code: number | null;
  signal: NodeJS.Signals | null;
  stdout: string;
  stderr: string;
}

export function runTs(file: string, env: NodeJS.ProcessEnv, timeoutMs: number): Promise<RunResult> {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, ['--import', 'tsx', file], {
      cwd: repoRoot,
      env: { ...process.env, TSX_TSCONFIG_PATH: join(repoRoot, 'examples', 'tsconfig.json'), ...env },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (d: Buffer) => (stdout += d.toString()));
    child.stderr.on('data', (d: Buffer) => (stderr += d.toString()));
    const timer = setTimeout(() => child.kill('SIGKILL'), timeoutMs);
    child.on('error', reject);
    child.on('close', (code, signal) => {
      clearTimeout(timer);
      resolve({ code, signal, stdout, stderr });
    });
  });
}

/** Every Redis key of a namespace: its BullMQ queue's and its Redis leases'. */
export const namespaceKeyPatterns = (ns: string) => [`bull:cronwarden-${ns}:*`, `cronwarden:lease:cronwarden/${ns}/*`];

export async function namespaceKeys(redis: Redis, ns: string): Promise<string[]> {
  const keys: string[] = [];
  for (const match of namespaceKeyPatterns(ns)) {
    let cursor = '0';
    do {
      const [next, found] = await redis.scan(cursor, 'MATCH', match, 'COUNT', 1000);
      keys.push(...found);
      cursor = next;
    } while (cursor !== '0');
  }
  return keys;
}

/** Run `file` with a scratch database and a fresh namespace; both are gone when it returns. */
export async function runWithServers(file: string, timeoutMs = 120_000): Promise<RunResult> {
  const db = await createTestDatabase({ migrate: false });
  const namespace = `docs-${randomBytes(4).toString('hex')}`;
  const redis = new Redis(REDIS_URL, { maxRetriesPerRequest: 2 });
  try {
    return await runTs(
      file,
      { CRONWARDEN_DATABASE_URL: db.url, CRONWARDEN_REDIS_URL: REDIS_URL, CRONWARDEN_NAMESPACE: namespace },
      timeoutMs,
    );
  } finally {
    const keys = await namespaceKeys(redis, namespace);
    if (keys.length > 0) await redis.del(...keys);
    redis.disconnect();
    await db.drop();
  }
}
