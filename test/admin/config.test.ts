/** Replica configuration: flags over env over a JSON file, validation messages, masked secrets. */
import { it } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describeConfig, loadReplicaConfig } from '../../src/config/replica-config.js';
import { InvalidConfigError } from '../../src/errors.js';

const env = {
  CRONWARDEN_BACKEND: 'postgres',
  CRONWARDEN_DATABASE_URL: 'postgres://app:s3cret-pw@db:5432/app',
  CRONWARDEN_REDIS_URL: 'redis://cache:6379',
  CRONWARDEN_JOBS: './jobs.js',
};

it('reads env, applies defaults, and the file fills what env leaves out; flags win over both', async () => {
  const dir = await mkdtemp(join(tmpdir(), 'cw-config-'));
  try {
    const file = join(dir, 'c.json');
    await writeFile(file, JSON.stringify({ adminPort: 9100, namespace: 'from-file', concurrency: 3, adminToken: 'file-token-0123456789' }));
    const c = loadReplicaConfig({ configFile: file, namespace: 'from-flag' }, env);
    assert.equal(c.namespace, 'from-flag');
    assert.equal(c.concurrency, 3);
    assert.equal(c.workerLockMs, 30_000);
    assert.deepEqual(c.admin, { host: '127.0.0.1', port: 9100, token: 'file-token-0123456789', url: undefined, enabled: true });
    assert.deepEqual(c.backend, { kind: 'postgres', url: env.CRONWARDEN_DATABASE_URL });
    assert.equal(c.ttlMs, 10_000);
    assert.equal(c.retentionDays, 14);
    assert.equal(loadReplicaConfig({}, { ...env, CRONWARDEN_RETENTION_DAYS: '0' }).retentionDays, 0, '0 keeps everything');
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
});

it('a wrong or missing value names the setting and what it accepts, without echoing it', () => {
  const cases: [Record<string, string>, RegExp][] = [
    [{ CRONWARDEN_BACKEND: 'zookeeper' }, /^CRONWARDEN_BACKEND \(--backend\): must be one of etcd, redis, postgres, memory$/],
    [{ CRONWARDEN_ADMIN_PORT: '70000' }, /^CRONWARDEN_ADMIN_PORT \(--admin-port\): must be at most 65535$/],
    [{ CRONWARDEN_WORKER_LOCK_MS: '10' }, /^CRONWARDEN_WORKER_LOCK_MS \(--worker-lock-ms\): must be at least 1000$/],
    [{ CRONWARDEN_RETENTION_DAYS: '-1' }, /^CRONWARDEN_RETENTION_DAYS \(--retention-days\): must be at least 0$/],
    [{ CRONWARDEN_ADMIN_TOKEN: 'tiny' }, /^CRONWARDEN_ADMIN_TOKEN: must be at least 16 characters/],
    [{ CRONWARDEN_ADMIN_URL: 'ftp://x' }, /^CRONWARDEN_ADMIN_URL \(--admin-url\): must be a URL starting with http:\/\/ or https:\/\/$/],
    [{ CRONWARDEN_REDIS_URL: '' }, /^CRONWARDEN_REDIS_URL \(--redis-url\): is required/],
    [{ CRONWARDEN_BACKEND: 'etcd' }, /^CRONWARDEN_ETCD_ENDPOINTS \(--etcd-endpoints\): is required for the etcd backend/],
  ];
  for (const [override, message] of cases) {
    assert.throws(() => loadReplicaConfig({}, { ...env, ...override }), (err: unknown) => {
      assert.ok(err instanceof InvalidConfigError);
      assert.match(err.message, message);
      assert.ok(!err.message.includes('tiny'), err.message);
      return true;
    });
  }
});

it('describeConfig masks the database password and the admin token', () => {
  const c = loadReplicaConfig({}, { ...env, CRONWARDEN_ADMIN_TOKEN: 'super-secret-admin-token' });
  const text = JSON.stringify(describeConfig(c));
  assert.ok(!text.includes('s3cret-pw'), text);
  assert.ok(!text.includes('super-secret-admin-token'), text);
  assert.match(text, /postgres:\/\/app:\*\*\*\*\*@db:5432\/app/);
});
