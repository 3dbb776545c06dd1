/**
 * The "dropping a namespace" commands of docs/guides/sharing-a-database.md, run as written against
 * a namespace a replica (with the Redis lease backend, so it leaves lease keys too) has used: every
 * Redis key of the namespace and its schema are gone, and another namespace's keys are untouched.
 * Before that, every key the replica left is checked against the guide's list of what is kept.
 */
import { it } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { randomBytes } from 'node:crypto';
import { Redis } from 'ioredis';
import { pino } from 'pino';
import { Replica } from '../../src/replica/replica.js';
import { defineJob } from '../../src/jobs/define-job.js';
import { createLeaseBackend } from '../../src/locks/create-backend.js';
import { migrateDatabase } from '../../src/db/migrate.js';
import { createTestDatabase } from '../support/postgres-database.js';
import { codeBlocks } from './markdown.js';
import { REDIS_URL, namespaceKeys } from './run-sample.js';

it('the documented commands drop every Redis key and the schema of a namespace, and nothing else', async () => {
  const block = codeBlocks('docs/guides/sharing-a-database.md').find(
    (b) => b.marker?.kind === 'shell' && b.marker.arg === 'drop-namespace',
  );
  assert.ok(block, 'the drop-namespace block is marked <!-- sample: shell drop-namespace -->');
  const db = await createTestDatabase({ migrate: false });
  const redis = new Redis(REDIS_URL, { maxRetriesPerRequest: 2 });
  const ns = `docs-drop-${randomBytes(4).toString('hex')}`;
  const bystander = `bull:cronwarden-${ns}x:meta`; // a namespace whose name starts with ours
  try {
    const { schema } = await migrateDatabase(db.url, { namespace: ns });
    const backend = await createLeaseBackend({ kind: 'redis', url: REDIS_URL });
    const tick = defineJob({ name: 'tick', schedule: '* * * * * *', handler: () => undefined });
    const replica = new Replica({
      namespace: ns,
      schema,
      backend,
      databaseUrl: db.url,
      redisUrl: REDIS_URL,
      jobs: [tick],
      logger: pino({ level: 'silent' }),
    });
    await replica.start();
    await new Promise((resolve) => setTimeout(resolve, 2500));
    await replica.stop();
    await backend.close();
    await redis.set(bystander, 'keep');
    const before = await namespaceKeys(redis, ns);
    assert.ok(
      before.some((k) => k.includes(':run-')),
      `runs were queued: ${before.join(', ')}`,
    );
    assert.ok(
      before.some((k) => k.endsWith('#token')),
      'the Redis lease left its token counter',
    );
    // Every key the replica left is one the guide's "What a deployment keeps in Redis" names.
    const keptInRedis = /## What a deployment keeps in Redis\n([\s\S]*?)\n## /.exec(
      readFileSync(new URL('../../docs/guides/sharing-a-database.md', import.meta.url), 'utf8'),
    )![1]!;
    const named = new Set([...keptInRedis.matchAll(/`([a-z-]+)`/g)].map((m) => m[1]!));
    for (const key of before) {
      const queueKey = key.startsWith(`bull:cronwarden-${ns}:`) ? key.slice(`bull:cronwarden-${ns}:`.length) : null;
      if (queueKey !== null && /^runs?-[0-9a-f]{12}-\d+(-\d+|-r\d+)?(:lock)?$/.test(queueKey)) {
        assert.match(
          keptInRedis,
          /`bull:cronwarden-<namespace>:run-<ledger>-<run id>`, where\s+`<ledger>` is the first 12 hex digits/,
        );
        if (queueKey.startsWith('runs-')) assert.match(keptInRedis, /`…:runs-<ledger>-<first run id>-<count>`/);
        if (/-r\d+(:lock)?$/.test(queueKey)) assert.match(keptInRedis, /`…:run-<ledger>-<run id>-r<n>`/);
        if (queueKey.endsWith(':lock')) assert.match(keptInRedis, /`…:run-<ledger>-<run id>:lock`/);
      } else if (queueKey !== null) assert.ok(named.has(queueKey), `the guide names the queue's \`${queueKey}\``);
      else assert.match(key, new RegExp(`^cronwarden:lease:cronwarden/${ns}/scheduler(#token)?$`), key);
    }

    const r = spawnSync('bash', ['-euo', 'pipefail', '-c', block.code], {
      env: {
        ...process.env,
        NS: ns,
        SCHEMA: schema,
        CRONWARDEN_REDIS_URL: REDIS_URL,
        CRONWARDEN_DATABASE_URL: db.url,
      },
      encoding: 'utf8',
    });
    assert.equal(r.status, 0, r.stderr);
    assert.deepEqual(await namespaceKeys(redis, ns), []);
    const left = await db.pool.query('SELECT 1 FROM pg_namespace WHERE nspname = $1', [schema]);
    assert.equal(left.rowCount, 0, `schema ${schema} dropped`);
    assert.equal(await redis.get(bystander), 'keep', "another namespace's keys are untouched");
  } finally {
    await redis.del(bystander);
    redis.disconnect();
    await db.drop();
  }
});
