/**
 * Each setting is defined once for the CLI and the library (issue 24): `cronwarden start` shows the
 * library's defaults and accepts the library's ranges, and the options it hands a Replica go
 * through the same defaults-and-validate step as any library caller's.
 */
import { it } from 'node:test';
import assert from 'node:assert/strict';
import { readdirSync, readFileSync } from 'node:fs';
import { dirname, join, relative, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { pino } from 'pino';
import { loadReplicaConfig, loadSettings } from '../../src/config/replica-config.js';
import { envName, settingKeys, type SettingKey } from '../../src/config/settings.js';
import { toReplicaOptions } from '../../src/config/to-replica-options.js';
import { InvalidArgumentError } from '../../src/errors.js';
import { MemoryLeaseBackend } from '../../src/locks/memory.js';
import {
  DAY_MS,
  replicaDefaults,
  replicaSettings,
  resolveReplicaOptions,
  type BoundedSetting,
  type ResolvedReplicaOptions,
} from '../../src/replica/replica-defaults.js';
import type { ReplicaOptions } from '../../src/replica/replica-options.js';

const src = resolve(dirname(fileURLToPath(import.meta.url)), '../../src');
const env = {
  CRONWARDEN_BACKEND: 'memory',
  CRONWARDEN_DATABASE_URL: 'postgres://app@db:5432/app',
  CRONWARDEN_REDIS_URL: 'redis://cache:6379',
  CRONWARDEN_JOBS: './jobs.js',
};
/** What a library caller must give; everything else has a default. */
const required = (): ReplicaOptions => ({
  backend: new MemoryLeaseBackend(),
  jobs: [],
  databaseUrl: env.CRONWARDEN_DATABASE_URL,
  redisUrl: env.CRONWARDEN_REDIS_URL,
  logger: pino({ level: 'silent' }),
});

/** The settings both have: the CLI's key, the library's definition, and the library option that takes `v`. */
const twins: [SettingKey, BoundedSetting, (v: number) => Partial<ReplicaOptions>][] = [
  ['leaseTtlMs', replicaSettings.ttlMs, (v) => ({ election: { ttlMs: v } })],
  ['concurrency', replicaSettings.concurrency, (v) => ({ worker: { concurrency: v } })],
  ['workerLockMs', replicaSettings.lockDurationMs, (v) => ({ worker: { lockDurationMs: v } })],
  ['shutdownGraceMs', replicaSettings.shutdownGraceMs, (v) => ({ shutdownGraceMs: v })],
  ['standInGraceMs', replicaSettings.standInGraceMs, (v) => ({ standInGraceMs: v })],
  ['standInsPerJob', replicaSettings.standInsPerJob, (v) => ({ standInsPerJob: v })],
  ['shards', replicaSettings.shards, (v) => ({ shards: v })],
  ['retentionDays', replicaSettings.retentionDays, (v) => ({ retentionMs: v * DAY_MS })],
  ['adminPort', replicaSettings.adminPort, (v) => ({ admin: { port: v } })],
  ['adminNiceness', replicaSettings.adminNiceness, (v) => ({ admin: { niceness: v } })],
  ['ledgerCheckIntervalMs', replicaSettings.ledgerCheckIntervalMs, (v) => ({ ledgerCheck: { intervalMs: v } })],
  ['ledgerCheckWindowMs', replicaSettings.ledgerCheckWindowMs, (v) => ({ ledgerCheck: { windowMs: v } })],
  ['ledgerCheckMaxRows', replicaSettings.ledgerCheckMaxRows, (v) => ({ ledgerCheck: { maxRows: v } })],
];

/** The resolved values a setting of `cronwarden start` feeds. */
function settingValues(o: ResolvedReplicaOptions) {
  return {
    namespace: o.namespace,
    schema: o.schema,
    ttlMs: o.election.ttlMs,
    concurrency: o.worker.concurrency,
    lockDurationMs: o.worker.lockDurationMs,
    shutdownGraceMs: o.shutdownGraceMs,
    standInGraceMs: o.standInGraceMs,
    standInsPerJob: o.standInsPerJob,
    shards: o.shards,
    retentionMs: o.retentionMs,
    ledgerCheck: o.ledgerCheck,
    admin: { host: o.admin?.host, port: o.admin?.port, niceness: o.admin?.niceness },
  };
}

it('cronwarden start with nothing set gives the replica what the library gives a caller who sets nothing', () => {
  const made = required();
  const viaCli = resolveReplicaOptions(toReplicaOptions(loadReplicaConfig({}, env), made));
  const viaLibrary = resolveReplicaOptions({ ...made, admin: {} });
  assert.deepEqual(settingValues(viaCli), settingValues(viaLibrary));
  assert.equal(viaLibrary.election.ttlMs, 10_000, 'the documented TTL');
  assert.equal(viaLibrary.namespace, replicaDefaults.namespace);
});

it('the CLI and the library accept one range for each setting they share', () => {
  const accepts = (fn: () => unknown) => {
    try {
      fn();
      return true;
    } catch (err) {
      assert.ok(err instanceof InvalidArgumentError, String(err));
      return false;
    }
  };
  for (const [key, setting, option] of twins) {
    for (const v of [setting.min - 1, setting.min, setting.max, setting.max + 1]) {
      const inRange = v >= setting.min && v <= setting.max;
      const cli = accepts(() => loadSettings([key], {}, { [envName(key)]: String(v) }));
      const library = accepts(() => resolveReplicaOptions({ ...required(), ...option(v) }));
      assert.equal(cli, inRange, `${envName(key)}=${v}`);
      assert.equal(library, inRange, `${key} ${v} through the library`);
    }
  }
});

it('settings.ts writes no default or range of its own for a setting the library has', () => {
  const text = readFileSync(join(src, 'config/settings.ts'), 'utf8');
  const literalDefault: string[] = [];
  const literalRange: string[] = [];
  for (const key of settingKeys) {
    const block = new RegExp(`^  ${key}: \\{\\n([\\s\\S]*?)^  \\},$`, 'm').exec(text)?.[1];
    assert.ok(block, `the definition of ${key}`);
    if (/^\s*default: (['"\d]|true|false)/m.test(block)) literalDefault.push(key);
    if (/int\(\s*\d/.test(block)) literalRange.push(key);
  }
  // The library has no log settings, no admin switch (it takes `admin: false`) and no connect timeout.
  assert.deepEqual(literalDefault, ['logLevel', 'logFormat', 'adminEnabled']);
  assert.deepEqual(literalRange, ['connectTimeoutMs']);
});

/**
 * A fallback `name ?? <literal>` (or a parameter default) that repeats the default of one of the
 * replica's settings, anywhere in src/ but the one definition. The ones left sit in files of the
 * admin and run-path work; each line here should go, never grow.
 */
const KNOWN_TWINS = [
  "admin/probe-server.ts: host ?? '127.0.0.1'",
  "admin/server.ts: host ?? '127.0.0.1'",
  "admin/server.ts: host ?? '127.0.0.1'",
  'admin/server.ts: port ?? 8080',
  'jobs/bullmq-worker.ts: concurrency ?? 10',
  'jobs/bullmq-worker.ts: graceMs = 10_000',
  'jobs/bullmq-worker.ts: lockDurationMs ?? 30_000',
];

it("no part of the library repeats a replica setting's default", () => {
  const defaults: Record<string, readonly (string | number)[]> = {
    ttlMs: [replicaSettings.ttlMs.default],
    concurrency: [replicaSettings.concurrency.default],
    lockDurationMs: [replicaSettings.lockDurationMs.default],
    shutdownGraceMs: [replicaSettings.shutdownGraceMs.default],
    graceMs: [replicaSettings.shutdownGraceMs.default, replicaSettings.standInGraceMs.default],
    standInGraceMs: [replicaSettings.standInGraceMs.default],
    perJob: [replicaSettings.standInsPerJob.default],
    standInsPerJob: [replicaSettings.standInsPerJob.default],
    shards: [replicaSettings.shards.default],
    port: [replicaSettings.adminPort.default],
    niceness: [replicaSettings.adminNiceness.default],
    host: [replicaDefaults.adminHost],
    namespace: [replicaDefaults.namespace],
  };
  const found: string[] = [];
  const pattern = /\b(\w+)\s*(\?\?|=)\s*(\d[\d_]*|'[^']*')/g;
  for (const file of sources(src)) {
    const rel = relative(src, file);
    if (rel === 'replica/replica-defaults.ts' || rel.startsWith('drill/')) continue;
    for (const m of readFileSync(file, 'utf8').matchAll(pattern)) {
      const [, name, op, literal] = m as unknown as [string, string, string, string];
      const value = literal.startsWith("'") ? literal.slice(1, -1) : Number(literal.replace(/_/g, ''));
      if (defaults[name]?.includes(value)) found.push(`${rel}: ${name} ${op} ${literal}`);
    }
  }
  assert.deepEqual(found.sort(), [...KNOWN_TWINS].sort());
});

function* sources(dir: string): Generator<string> {
  for (const entry of readdirSync(dir, { withFileTypes: true })) {
    const path = join(dir, entry.name);
    if (entry.isDirectory()) yield* sources(path);
    else if (entry.name.endsWith('.ts')) yield path;
  }
}
