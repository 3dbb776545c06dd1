/**
 * Replica configuration: flags over env over a JSON file, each setting defined once, validation
 * messages that never echo a value, the config file refusing what cannot work, masked secrets.
 */
import { it } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Command } from 'commander';
import { registerMigrate } from '../../src/cli/migrate-command.js';
import { registerStart } from '../../src/cli/start-command.js';
import { jsonErrorOffset, nearestKey } from '../../src/config/config-file.js';
import { describeConfig, loadReplicaConfig, loadSettings } from '../../src/config/replica-config.js';
import {
  envName,
  fileKeys,
  flagName,
  settingKeys,
  settingName,
  settings,
  settingsTable,
  type SettingDefinition,
  type SettingKey,
} from '../../src/config/settings.js';
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
    await writeFile(
      file,
      JSON.stringify({ adminPort: 9100, namespace: 'from-file', concurrency: 3, adminToken: 'file-token-0123456789' }),
    );
    const c = loadReplicaConfig({ config: file, namespace: 'from-flag' }, env);
    assert.equal(c.namespace, 'from-flag');
    assert.equal(c.concurrency, 3);
    assert.equal(c.workerLockMs, 30_000);
    assert.deepEqual(c.admin, {
      host: '127.0.0.1',
      port: 9100,
      token: 'file-token-0123456789',
      readsNeedToken: false,
      url: undefined,
      enabled: true,
      niceness: 10,
      probePort: undefined,
      probeHost: undefined,
    });
    assert.deepEqual(c.backend, { kind: 'postgres', url: env.CRONWARDEN_DATABASE_URL });
    assert.equal(c.ttlMs, 10_000);
    assert.equal(c.retentionDays, 14);
    assert.equal(
      loadReplicaConfig({}, { ...env, CRONWARDEN_RETENTION_DAYS: '0' }).retentionDays,
      0,
      '0 keeps everything',
    );
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
});

it('a wrong or missing value names the setting and what it accepts, without echoing it', () => {
  const cases: [Record<string, string>, RegExp][] = [
    [
      { CRONWARDEN_BACKEND: 'zookeeper' },
      /^CRONWARDEN_BACKEND \(--backend\): must be one of etcd, redis, postgres, memory$/,
    ],
    [{ CRONWARDEN_ADMIN_PORT: '70000' }, /^CRONWARDEN_ADMIN_PORT \(--admin-port\): must be at most 65535$/],
    [{ CRONWARDEN_WORKER_LOCK_MS: '10' }, /^CRONWARDEN_WORKER_LOCK_MS \(--worker-lock-ms\): must be at least 1000$/],
    [{ CRONWARDEN_RETENTION_DAYS: '-1' }, /^CRONWARDEN_RETENTION_DAYS \(--retention-days\): must be at least 0$/],
    [{ CRONWARDEN_ADMIN_TOKEN: 'tiny' }, /^CRONWARDEN_ADMIN_TOKEN: must be at least 16 characters/],
    [
      { CRONWARDEN_ADMIN_URL: 'ftp://x' },
      /^CRONWARDEN_ADMIN_URL \(--admin-url\): must be a URL starting with http:\/\/ or https:\/\/$/,
    ],
    [{ CRONWARDEN_REDIS_URL: '' }, /^CRONWARDEN_REDIS_URL \(--redis-url\): is required/],
    [{ CRONWARDEN_ADMIN_NICENESS: '20' }, /^CRONWARDEN_ADMIN_NICENESS \(--admin-niceness\): must be at most 19$/],
    [{ CRONWARDEN_ADMIN_NICENESS: '-5' }, /^CRONWARDEN_ADMIN_NICENESS \(--admin-niceness\): must be at least 0$/],
    [
      { CRONWARDEN_PROBE_PORT: '8080' },
      /^CRONWARDEN_PROBE_PORT \(--probe-port\): must differ from CRONWARDEN_ADMIN_PORT \(--admin-port\)$/,
    ],
    [
      { CRONWARDEN_PROBE_PORT: '8081', CRONWARDEN_ADMIN_ENABLED: 'false' },
      /^CRONWARDEN_PROBE_PORT \(--probe-port\): is served with the admin HTTP, which CRONWARDEN_ADMIN_ENABLED=false turns off$/,
    ],
    [
      { CRONWARDEN_PROBE_HOST: '0.0.0.0' },
      /^CRONWARDEN_PROBE_HOST \(--probe-host\): is used only with CRONWARDEN_PROBE_PORT/,
    ],
    [
      { CRONWARDEN_BACKEND: 'etcd' },
      /^CRONWARDEN_ETCD_ENDPOINTS \(--etcd-endpoints\): is required for the etcd backend/,
    ],
  ];
  for (const [override, message] of cases) {
    assert.throws(
      () => loadReplicaConfig({}, { ...env, ...override }),
      (err: unknown) => {
        assert.ok(err instanceof InvalidConfigError);
        assert.match(err.message, message);
        assert.ok(!err.message.includes('tiny'), err.message);
        return true;
      },
    );
  }
});

it('describeConfig masks the database password and the admin token', () => {
  const c = loadReplicaConfig({}, { ...env, CRONWARDEN_ADMIN_TOKEN: 'super-secret-admin-token' });
  const text = JSON.stringify(describeConfig(c));
  assert.ok(!text.includes('s3cret-pw'), text);
  assert.ok(!text.includes('super-secret-admin-token'), text);
  assert.match(text, /postgres:\/\/app:\*\*\*\*\*@db:5432\/app/);
});

// ---- Each setting defined once (issue 10) and the config file refusing what cannot work (issue 12).

/** A valid value for every setting, as text: a new setting without one does not compile. */
const samples: Record<Exclude<SettingKey, 'config'>, [text: string, parsed: unknown]> = {
  backend: ['redis', 'redis'],
  schema: ['cronwarden_app', 'cronwarden_app'],
  backendUrl: ['redis://lease:6379', 'redis://lease:6379'],
  etcdEndpoints: ['http://e1:2379,http://e2:2379', 'http://e1:2379,http://e2:2379'],
  databaseUrl: ['postgres://db/app', 'postgres://db/app'],
  redisUrl: ['rediss://cache:6380', 'rediss://cache:6380'],
  jobs: ['./dist/jobs.js', './dist/jobs.js'],
  replicaId: ['host-a', 'host-a'],
  namespace: ['team_b', 'team_b'],
  leaseTtlMs: ['4000', 4000],
  concurrency: ['3', 3],
  workerLockMs: ['2000', 2000],
  shutdownGraceMs: ['0', 0],
  standInGraceMs: ['250', 250],
  standInsPerJob: ['3', 3],
  shards: ['8', 8],
  retentionDays: ['30', 30],
  ledgerCheckIntervalMs: ['0', 0],
  ledgerCheckWindowMs: ['300000', 300_000],
  ledgerCheckMaxRows: ['50000', 50_000],
  connectTimeoutMs: ['1500', 1500],
  logLevel: ['debug', 'debug'],
  logFormat: ['pretty', 'pretty'],
  adminHost: ['0.0.0.0', '0.0.0.0'],
  adminPort: ['9000', 9000],
  adminUrl: ['http://host-a:9000', 'http://host-a:9000'],
  adminToken: ['0123456789abcdef-token', '0123456789abcdef-token'],
  adminReadsNeedToken: ['true', true],
  adminEnabled: ['false', false],
  adminNiceness: ['0', 0],
  probePort: ['8081', 8081],
  probeHost: ['0.0.0.0', '0.0.0.0'],
};

async function withDir<T>(fn: (dir: string) => Promise<T>): Promise<T> {
  const dir = await mkdtemp(join(tmpdir(), 'cw-config-'));
  try {
    return await fn(dir);
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
}

/** The InvalidConfigError `fn` throws (fails the test if it throws nothing or something else). */
function refusal(fn: () => unknown): InvalidConfigError {
  try {
    fn();
  } catch (err) {
    assert.ok(err instanceof InvalidConfigError, String(err));
    assert.ok(!err.message.includes('\n'), err.message);
    return err;
  }
  assert.fail('accepted');
}

it('every setting has one definition: the flag, env name and file key derive from it, and each reads the same value', async () => {
  const program = new Command('cronwarden');
  registerStart(program);
  registerMigrate(program);
  const start = program.commands.find((c) => c.name() === 'start')!;
  // Commander's options are exactly the settings that have a flag, parsed under the setting's key.
  const withFlag = settingKeys.filter((k) => flagName(k) !== undefined);
  assert.deepEqual(
    start.options.map((o) => o.long),
    withFlag.map(flagName),
  );
  assert.deepEqual(
    start.options.map((o) => o.attributeName()),
    withFlag,
  );
  assert.equal(flagName('adminToken'), undefined, 'a secret is never a flag (flags show in ps)');
  const migrate = program.commands.find((c) => c.name() === 'migrate')!;
  assert.deepEqual(
    migrate.options.map((o) => o.long),
    ['--config', '--database-url', '--namespace', '--schema', '--connect-timeout-ms'],
  );
  assert.equal(envName('leaseTtlMs'), 'CRONWARDEN_LEASE_TTL_MS');
  assert.equal(settingName('adminPort'), 'CRONWARDEN_ADMIN_PORT (--admin-port)');

  await withDir(async (dir) => {
    for (const key of Object.keys(samples) as (keyof typeof samples)[]) {
      const [text, parsed] = samples[key];
      const file = join(dir, `${key}.json`);
      // In the file, numbers and booleans are JSON values; strings stay strings.
      await writeFile(file, JSON.stringify({ [key]: typeof parsed === 'string' ? text : parsed }));
      const viaFile = loadSettings([key], { config: file }, {});
      const viaEnv = loadSettings([key], {}, { [envName(key)]: text });
      assert.deepEqual(viaFile, { [key]: parsed }, `${key} from the file`);
      assert.deepEqual(viaEnv, { [key]: parsed }, `${key} from ${envName(key)}`);
      if (flagName(key))
        assert.deepEqual(loadSettings([key], { [key]: text }, {}), { [key]: parsed }, `${key} from ${flagName(key)}`);
      const def: SettingDefinition = settings[key];
      if (def.default !== undefined)
        assert.deepEqual(loadSettings([key], {}, {}), { [key]: def.default }, `${key} default`);
    }
  });
  // The documented file keys are the ones the loader reads: the old jobsModule/ttlMs are gone.
  assert.ok(fileKeys.includes('jobs') && fileKeys.includes('leaseTtlMs'));
  assert.ok(!fileKeys.includes('jobsModule') && !fileKeys.includes('ttlMs') && !fileKeys.includes('config'));
});

it('the configuration table in docs/reference/configuration.md is the one derived from the definitions', async () => {
  const page = await readFile(new URL('../../docs/reference/configuration.md', import.meta.url), 'utf8');
  const block = /<!-- settings-table:start -->\n([\s\S]*?)\n<!-- settings-table:end -->/.exec(page)?.[1];
  assert.equal(block, settingsTable(), 'regenerate it with: node --import tsx scripts/settings-table.ts');
});

it('the config file: unknown keys are refused with the near-miss named, renamed keys with the new name', async () => {
  await withDir(async (dir) => {
    const file = join(dir, 'c.json');
    await writeFile(
      file,
      JSON.stringify({
        namespce: 'team-a',
        adminToke: 'file-token-0123456789',
        jobsModule: './j.js',
        ttlMs: 3000,
        CRONWARDEN_ADMIN_PORT: 1,
        zzz: 1,
      }),
    );
    const err = refusal(() => loadReplicaConfig({ config: file }, env));
    assert.equal(
      err.message,
      `CRONWARDEN_CONFIG (--config): ${file}: unknown key "namespce" (did you mean "namespace"?); unknown key "adminToke" (did you mean "adminToken"?); ` +
        'unknown key "jobsModule": it is now "jobs"; unknown key "ttlMs": it is now "leaseTtlMs"; unknown key "CRONWARDEN_ADMIN_PORT" (did you mean "adminPort"?); ' +
        `unknown key "zzz" (known keys: ${fileKeys.join(', ')})`,
    );
    assert.ok(!err.message.includes('file-token'), err.message);
    assert.equal(nearestKey('leaseTtlMS'), 'leaseTtlMs');
    assert.equal(nearestKey('admin-token'), 'adminToken');
    assert.equal(nearestKey('password'), undefined);
  });
});

it('the config file must hold an object: null, [], a number or a string are refused, and a FIFO does not block', async () => {
  await withDir(async (dir) => {
    const file = join(dir, 'c.json');
    for (const [content, what] of [
      ['null', 'null'],
      ['[]', 'an array'],
      ['[{"namespace":"x"}]', 'an array'],
      ['42', 'a number'],
      ['"x"', 'a string'],
    ]) {
      await writeFile(file, content!);
      assert.match(
        refusal(() => loadReplicaConfig({ config: file }, env)).message,
        new RegExp(`: must hold a JSON object .*, not ${what}$`),
        content,
      );
    }
    const fifo = join(dir, 'fifo');
    execFileSync('mkfifo', [fifo]);
    assert.equal(
      refusal(() => loadReplicaConfig({ config: fifo }, env)).message,
      `CRONWARDEN_CONFIG (--config): ${fifo}: is not a regular file`,
    );
    assert.equal(
      refusal(() => loadReplicaConfig({ config: dir }, env)).message,
      `CRONWARDEN_CONFIG (--config): ${dir}: is not a regular file`,
    );
    assert.equal(
      refusal(() => loadReplicaConfig({}, { ...env, CRONWARDEN_CONFIG: join(dir, 'nope.json') })).message,
      `CRONWARDEN_CONFIG (--config): ${join(dir, 'nope.json')}: cannot be read (ENOENT)`,
    );
  });
});

it('malformed JSON is refused by line and column, never quoting the file (which may hold a secret)', async () => {
  const secret = 'S3cretTokenValue-0123456789';
  const cases: [string, string][] = [
    [`{\n  "namespace": "a",\n  "adminToken": ${secret}\n}`, 'line 3, column 17'],
    [`{"adminToken": "${secret}",}`, `line 1, column ${`{"adminToken": "${secret}",`.length + 1}`],
    [`{"adminToken": "${secret}`, `line 1, column ${`{"adminToken": "${secret}`.length + 1}`],
    [`{"adminToken": '${secret}'}`, 'line 1, column 16'],
    [`{"databaseUrl": "postgres://u:${secret}@db/app"\n"adminPort": 1}`, 'line 2, column 1'],
  ];
  await withDir(async (dir) => {
    const file = join(dir, 'c.json');
    for (const [content, at] of cases) {
      await writeFile(file, content);
      const err = refusal(() => loadReplicaConfig({ config: file }, env));
      assert.equal(err.message, `CRONWARDEN_CONFIG (--config): ${file}: is not valid JSON (${at})`);
      for (const part of [secret.slice(0, 4), 'S3cr', 'postgres://u'])
        assert.ok(!err.message.includes(part), err.message);
    }
  });
});

it('the JSON error locator agrees with JSON.parse on 20,000 mutated documents (fixed seed)', () => {
  let seed = 12;
  const random = () => (seed = (seed * 1103515245 + 12345) % 2 ** 31) / 2 ** 31;
  const base = JSON.stringify(
    { namespace: 'a-b', adminPort: 8080, n: [1, -2.5e3, true, false, null, { x: 'q\\"\u00e9\\u0041' }], s: '' },
    null,
    1,
  );
  const alphabet = '{}[]:,"\\ -+.0123456789eEtruefalsn\n\t\u0001';
  for (let i = 0; i < 20_000; i++) {
    const chars = [...base];
    for (let m = 1 + Math.floor(random() * 3); m > 0; m--) {
      const at = Math.floor(random() * (chars.length + 1));
      const op = random();
      const ch = alphabet[Math.floor(random() * alphabet.length)]!;
      if (op < 0.4) chars.splice(at, 1);
      else if (op < 0.7) chars.splice(at, 0, ch);
      else chars[at] = ch;
    }
    const text = chars.join('');
    let valid = true;
    try {
      JSON.parse(text);
    } catch {
      valid = false;
    }
    const offset = jsonErrorOffset(text);
    if (valid) assert.equal(offset, undefined, text);
    else assert.ok(offset !== undefined && offset >= 0 && offset <= text.length, text);
  }
});

it('an empty environment variable counts as unset, so the file value shows through', async () => {
  await withDir(async (dir) => {
    const file = join(dir, 'c.json');
    await writeFile(
      file,
      JSON.stringify({ namespace: 'from-file', adminPort: 9100, adminToken: 'file-token-0123456789' }),
    );
    const c = loadReplicaConfig(
      { config: file },
      {
        ...env,
        CRONWARDEN_NAMESPACE: '',
        CRONWARDEN_ADMIN_PORT: '',
        CRONWARDEN_ADMIN_TOKEN: '',
        CRONWARDEN_CONFIG: '',
      },
    );
    assert.equal(c.namespace, 'from-file');
    assert.equal(c.admin.port, 9100);
    assert.equal(c.admin.token, 'file-token-0123456789');
  });
});

it('values are not coerced: a numeric token, a null/[]/blank port and unusable tokens are refused, never echoed', async () => {
  const cases: [Record<string, unknown>, string][] = [
    [
      // eslint-disable-next-line no-loss-of-precision -- the point: JSON numbers this long lose digits
      { adminToken: 1234567890123456789 },
      'adminToken in FILE: must be a string (in the config file: in double quotes)',
    ],
    [{ adminPort: null }, 'adminPort in FILE: must be a whole number'],
    [{ adminPort: [] }, 'adminPort in FILE: must be a whole number'],
    [{ adminPort: ' ' }, 'adminPort in FILE: must be a whole number'],
    [{ adminPort: true }, 'adminPort in FILE: must be a whole number'],
    [{ adminPort: 80.5 }, 'adminPort in FILE: must be a whole number'],
    [{ adminPort: '8e3' }, 'adminPort in FILE: must be a whole number'],
    [{ concurrency: {} }, 'concurrency in FILE: must be a whole number'],
    [{ adminEnabled: 'no' }, 'adminEnabled in FILE: must be true or false'],
    [{ namespace: null }, 'namespace in FILE: must be a string (in the config file: in double quotes)'],
    [
      { adminToken: 'Secret with spaces 0123' },
      'adminToken in FILE: may contain only printable ASCII characters, no spaces (use e.g. `openssl rand -hex 32`)',
    ],
    [
      { adminToken: 'Secret-wïth-ümlauts-0123' },
      'adminToken in FILE: may contain only printable ASCII characters, no spaces (use e.g. `openssl rand -hex 32`)',
    ],
    [
      { adminToken: ' Secret-padded-0123456 ' },
      'adminToken in FILE: may contain only printable ASCII characters, no spaces (use e.g. `openssl rand -hex 32`)',
    ],
  ];
  await withDir(async (dir) => {
    const file = join(dir, 'c.json');
    for (const [content, message] of cases) {
      await writeFile(file, JSON.stringify(content));
      const err = refusal(() => loadReplicaConfig({ config: file }, env));
      assert.equal(err.message, message.replace('FILE', file), JSON.stringify(content));
      assert.ok(!/Secret|1234567890/.test(err.message), err.message);
    }
  });
  // The same through the environment, where every value is text.
  assert.equal(
    refusal(() => loadReplicaConfig({}, { ...env, CRONWARDEN_ADMIN_PORT: ' ' })).message,
    'CRONWARDEN_ADMIN_PORT (--admin-port): must be a whole number',
  );
  assert.equal(
    refusal(() => loadReplicaConfig({ adminPort: '' }, env)).message,
    'CRONWARDEN_ADMIN_PORT (--admin-port): must be a whole number',
  );
  const spaced = refusal(() => loadReplicaConfig({}, { ...env, CRONWARDEN_ADMIN_TOKEN: 'Secret token 0123456789' }));
  assert.match(spaced.message, /^CRONWARDEN_ADMIN_TOKEN: may contain only printable ASCII/);
  assert.ok(!spaced.message.includes('Secret'));
});

it('a lease backend URL must fit the backend: garbage, http:// for redis and bad etcd endpoints are refused', () => {
  const cases: [Record<string, string>, string][] = [
    [
      { CRONWARDEN_BACKEND: 'redis', CRONWARDEN_BACKEND_URL: 'garbage' },
      'CRONWARDEN_BACKEND_URL (--backend-url): must be a URL starting with redis:// or rediss:// for the redis backend',
    ],
    [
      { CRONWARDEN_BACKEND: 'redis', CRONWARDEN_BACKEND_URL: 'http://cache:6379' },
      'CRONWARDEN_BACKEND_URL (--backend-url): must be a URL starting with redis:// or rediss:// for the redis backend',
    ],
    [
      { CRONWARDEN_BACKEND: 'postgres', CRONWARDEN_BACKEND_URL: 'redis://cache:6379' },
      'CRONWARDEN_BACKEND_URL (--backend-url): must be a URL starting with postgres:// or postgresql:// for the postgres backend',
    ],
    [
      { CRONWARDEN_BACKEND: 'etcd', CRONWARDEN_ETCD_ENDPOINTS: 'garbage' },
      'CRONWARDEN_ETCD_ENDPOINTS (--etcd-endpoints): must be comma-separated URLs starting with http:// or https://',
    ],
    [
      { CRONWARDEN_BACKEND: 'etcd', CRONWARDEN_ETCD_ENDPOINTS: 'http://e1:2379,e2:2379' },
      'CRONWARDEN_ETCD_ENDPOINTS (--etcd-endpoints): must be comma-separated URLs starting with http:// or https://',
    ],
    [
      { CRONWARDEN_BACKEND: 'etcd', CRONWARDEN_ETCD_ENDPOINTS: ' , ' },
      'CRONWARDEN_ETCD_ENDPOINTS (--etcd-endpoints): must be comma-separated URLs starting with http:// or https://',
    ],
    [
      { CRONWARDEN_BACKEND: 'etcd', CRONWARDEN_BACKEND_URL: 'garbage' },
      'CRONWARDEN_BACKEND_URL (--backend-url): must be comma-separated URLs starting with http:// or https:// for the etcd backend',
    ],
    [
      { CRONWARDEN_BACKEND: 'memory', CRONWARDEN_BACKEND_URL: 'redis://cache:6379' },
      'CRONWARDEN_BACKEND_URL (--backend-url): is not used by the memory backend (it has no server)',
    ],
  ];
  for (const [override, message] of cases)
    assert.equal(refusal(() => loadReplicaConfig({}, { ...env, ...override })).message, message);
  assert.deepEqual(
    loadReplicaConfig({}, { ...env, CRONWARDEN_BACKEND: 'redis', CRONWARDEN_BACKEND_URL: 'rediss://lease:6380' })
      .backend,
    { kind: 'redis', url: 'rediss://lease:6380' },
  );
  // The lease through Sentinel (the drill's redis-sentinel-failover uses it as written here).
  const sentinel = 'redis-sentinel://127.0.0.1:26379,127.0.0.1:26380/mymaster';
  assert.deepEqual(
    loadReplicaConfig({}, { ...env, CRONWARDEN_BACKEND: 'redis', CRONWARDEN_BACKEND_URL: sentinel }).backend,
    { kind: 'redis', url: sentinel },
  );
  assert.deepEqual(
    loadReplicaConfig(
      {},
      { ...env, CRONWARDEN_BACKEND: 'etcd', CRONWARDEN_ETCD_ENDPOINTS: 'http://e1:2379, https://e2:2379' },
    ).backend,
    { kind: 'etcd', endpoints: ['http://e1:2379', 'https://e2:2379'] },
  );
});
