/**
 * The shipped deploy files hand over on SIGTERM. Each file's own command lines are read out of it
 * (the systemd unit's ExecStartPre/ExecStart and Environment=, the manifest's initContainer and
 * container command, workingDir and env) and run as written, in a scratch application that has
 * the packed package installed: the migrate command on a fresh database, then two replicas. The
 * orchestrator's SIGTERM goes to the process it would signal (the unit's main process, the
 * container's PID 1); the lease must reach the other replica in under 1 s, the process must exit 0
 * within the file's stop timeout, and no process of it may be left. Only what differs per site is
 * replaced: server addresses (the scratch database, the shared Redis, the postgres lease backend
 * instead of etcd), a unique namespace, and admin (and probe) port 0 so two replicas share this host.
 * Real PostgreSQL and Redis.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { randomBytes, randomUUID } from 'node:crypto';
import { chmodSync, mkdirSync, readFileSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { parseAllDocuments } from 'yaml';
import { loadReplicaConfig } from '../../src/config/replica-config.js';
import { createTestDatabase } from '../support/postgres-database.js';
import { schemaForNamespace } from '../../src/db/tables.js';
import {
  LoggedProcess,
  packPackage,
  processesWithEnv,
  repoRoot,
  run,
  unpack,
  type LogLine,
  type Packed,
} from './support.js';

const SHARED_REDIS_URL = process.env.CRONWARDEN_TEST_REDIS_URL ?? 'redis://127.0.0.1:6379';
const readDeploy = (name: string) => readFileSync(join(repoRoot, 'deploy', name), 'utf8');

type Env = Record<string, string>;

/** What a deploy file says about running one replica. */
interface Deployment {
  file: string;
  /** The directory the file runs its commands in; it stands for the scratch application. */
  workingDir: string;
  migrate: string[];
  start: string[];
  /** The environment the file gives its migrate step or a replica on host (or pod) `host`. */
  env(host: string, secrets: { databaseUrl: string; adminToken: string }, step?: 'migrate' | 'start'): Env;
  /** How long the orchestrator waits after SIGTERM before it kills. */
  stopTimeoutMs: number;
}

// ---- systemd ------------------------------------------------------------------------------

/** systemd's word splitting: whitespace separates, double or single quotes group. */
function systemdWords(value: string): string[] {
  return [...value.matchAll(/"([^"]*)"|'([^']*)'|(\S+)/g)].map((m) => m[1] ?? m[2] ?? m[3]!);
}

/** The specifiers this unit may use; any other one fails the test rather than being guessed. */
function expandSpecifiers(value: string, host: string): string {
  return value.replace(/%(.)/g, (_m, c: string) => {
    if (c === 'H') return host;
    if (c === '%') return '%';
    throw new Error(`the unit uses specifier %${c}, which this test does not expand`);
  });
}

/** [Service] settings of a unit, each key with its values in order. */
function serviceSettings(unit: string): Map<string, string[]> {
  const settings = new Map<string, string[]>();
  let section = '';
  for (const raw of unit.replace(/\\\n/g, ' ').split('\n')) {
    const line = raw.trim();
    if (line === '' || line.startsWith('#') || line.startsWith(';')) continue;
    if (line.startsWith('[')) {
      section = line;
      continue;
    }
    if (section !== '[Service]') continue;
    const eq = line.indexOf('=');
    const key = line.slice(0, eq);
    settings.set(key, [...(settings.get(key) ?? []), line.slice(eq + 1)]);
  }
  return settings;
}

/** An EnvironmentFile: KEY=VALUE lines, # and ; comments, surrounding quotes removed, nothing expanded. */
function environmentFile(text: string): Env {
  const env: Env = {};
  for (const raw of text.split('\n')) {
    const line = raw.trim();
    if (line === '' || line.startsWith('#') || line.startsWith(';')) continue;
    const eq = line.indexOf('=');
    env[line.slice(0, eq).trim()] = line
      .slice(eq + 1)
      .trim()
      .replace(/^"(.*)"$|^'(.*)'$/, '$1$2');
  }
  return env;
}

function one(settings: Map<string, string[]>, key: string): string {
  const values = settings.get(key) ?? [];
  assert.equal(values.length, 1, `the unit sets ${key} once`);
  return values[0]!;
}

/** An Exec line as systemd runs it: prefixes removed, argv[0] is what is executed. */
function execArgv(value: string, host: string): string[] {
  const prefixes = /^[-:+!]*/.exec(value)![0];
  assert.ok(!value.startsWith('@'), 'the unit does not use @ (argv[0] differs from the executable)');
  return systemdWords(expandSpecifiers(value.slice(prefixes.length), host));
}

function systemdDeployment(): Deployment {
  const settings = serviceSettings(readDeploy('cronwarden.service'));
  // The unit's EnvironmentFile is filled from the shipped example (see the unit's install steps).
  const envFile = environmentFile(readDeploy('cronwarden.env'));
  const timeout = one(settings, 'TimeoutStopSec');
  assert.match(timeout, /^\d+$/, 'TimeoutStopSec in seconds');
  assert.equal(one(settings, 'KillSignal'), 'SIGTERM');
  return {
    file: 'deploy/cronwarden.service',
    workingDir: one(settings, 'WorkingDirectory'),
    migrate: execArgv(one(settings, 'ExecStartPre'), 'migrate-host'),
    start: execArgv(one(settings, 'ExecStart'), 'start-host'),
    env(host) {
      const env: Env = {};
      for (const value of settings.get('Environment') ?? []) {
        for (const word of systemdWords(expandSpecifiers(value, host))) {
          const eq = word.indexOf('=');
          env[word.slice(0, eq)] = word.slice(eq + 1);
        }
      }
      // EnvironmentFile= overrides Environment= (systemd.exec(5)).
      return { ...env, ...envFile };
    },
    stopTimeoutMs: Number(timeout) * 1000,
  };
}

// ---- Kubernetes ---------------------------------------------------------------------------

interface K8sEnvVar {
  name: string;
  value?: string;
  valueFrom?: { secretKeyRef?: { key: string }; fieldRef?: { fieldPath: string } };
}
interface K8sContainer {
  name: string;
  command?: string[];
  args?: string[];
  workingDir?: string;
  env?: K8sEnvVar[];
}

/** A container's env as the kubelet builds it: $(VAR) refers to variables defined above it. */
function k8sEnv(vars: K8sEnvVar[], secrets: Record<string, string>, fields: Record<string, string>): Env {
  const env: Env = {};
  for (const v of vars) {
    if (v.value !== undefined) {
      env[v.name] = v.value.replace(/\$\$|\$\(([A-Za-z_][A-Za-z0-9_]*)\)/g, (m, name?: string) =>
        name === undefined ? '$' : (env[name] ?? m),
      );
    } else if (v.valueFrom?.secretKeyRef) {
      const secret = secrets[v.valueFrom.secretKeyRef.key];
      assert.ok(
        secret !== undefined,
        `secret key ${v.valueFrom.secretKeyRef.key} is one the manifest's instructions create`,
      );
      env[v.name] = secret;
    } else if (v.valueFrom?.fieldRef) {
      const field = fields[v.valueFrom.fieldRef.fieldPath];
      assert.ok(field !== undefined, `field ${v.valueFrom.fieldRef.fieldPath}`);
      env[v.name] = field;
    } else {
      throw new Error(`env ${v.name}: neither value nor a known valueFrom`);
    }
  }
  return env;
}

function kubernetesDeployment(): Deployment {
  const docs = parseAllDocuments(readDeploy('kubernetes.yaml')).map((d) => d.toJS() as { kind: string; spec: any });
  const deployment = docs.find((d) => d.kind === 'Deployment')!;
  const pod = deployment.spec.template.spec as {
    initContainers: K8sContainer[];
    containers: K8sContainer[];
    terminationGracePeriodSeconds: number;
  };
  const migrate = pod.initContainers.find((c) => c.name === 'migrate')!;
  const replica = pod.containers.find((c) => c.name === 'cronwarden')!;
  assert.equal(migrate.workingDir, replica.workingDir, 'both containers run in the same directory');
  const argv = (c: K8sContainer) => [...(c.command ?? []), ...(c.args ?? [])];
  return {
    file: 'deploy/kubernetes.yaml',
    workingDir: replica.workingDir!,
    migrate: argv(migrate),
    start: argv(replica),
    env(pod, secrets, step = 'start') {
      const fields = { 'metadata.name': pod, 'status.podIP': '127.0.0.1' };
      const container = step === 'migrate' ? migrate : replica;
      return k8sEnv(
        container.env ?? [],
        { 'database-url': secrets.databaseUrl, 'admin-token': secrets.adminToken },
        fields,
      );
    },
    stopTimeoutMs: pod.terminationGracePeriodSeconds * 1000,
  };
}

// ---- the scratch application --------------------------------------------------------------

/** The environment a process starts with besides the file's: node on PATH, nothing of ours. */
function baseEnv(): Env {
  return {
    PATH: `${dirname(process.execPath)}:/usr/local/bin:/usr/bin:/bin`,
    HOME: process.env.HOME ?? '/tmp',
    LANG: 'C.UTF-8',
  };
}

/** Paths under the file's working directory point into the scratch application instead. */
function relocate(env: Env, from: string, to: string): Env {
  const prefix = from.endsWith('/') ? from : `${from}/`;
  return Object.fromEntries(
    Object.entries(env).map(([k, v]) => [k, v.startsWith(prefix) ? join(to, v.slice(prefix.length)) : v]),
  );
}

let packed: Packed;
let app: string;

before(async () => {
  packed = await packPackage();
  app = join(packed.dir, 'app');
  await unpack(packed.tarball, join(app, 'node_modules', 'cronwarden'));
  // What npm i adds for the bin, so an `npx cronwarden` command would find it too.
  mkdirSync(join(app, 'node_modules', '.bin'));
  symlinkSync('../cronwarden/bin/cronwarden.js', join(app, 'node_modules', '.bin', 'cronwarden'));
  chmodSync(join(app, 'node_modules', 'cronwarden', 'bin', 'cronwarden.js'), 0o755);
  writeFileSync(join(app, 'package.json'), JSON.stringify({ name: 'app', private: true, type: 'module' }));
  mkdirSync(join(app, 'dist'));
  // Due every second, so the leader is busy firing when it is told to stop.
  writeFileSync(
    join(app, 'dist', 'jobs.js'),
    "import { defineJob } from 'cronwarden';\nexport const tick = defineJob({ name: 'tick', schedule: '* * * * * *', handler: async () => {} });\n",
  );
});

after(() => {
  if (packed) rmSync(packed.dir, { recursive: true, force: true });
});

const deployments = [systemdDeployment, kubernetesDeployment];

describe('deploy files (real PostgreSQL and Redis, the packed package)', () => {
  for (const load of deployments) {
    const d = load();

    it(`${d.file}: the example configuration is accepted as written`, () => {
      const env = d.env('host-1', {
        databaseUrl: 'postgres://cronwarden:PASSWORD@db:5432/app',
        adminToken: randomBytes(32).toString('hex'),
      });
      assert.doesNotThrow(() => loadReplicaConfig({}, env));
    });

    it(
      `${d.file}: SIGTERM to the replica hands the lease over in under 1 s, exits 0, leaves no process`,
      { timeout: 180_000 },
      async () => {
        const db = await createTestDatabase({ migrate: false });
        const namespace = `dp${randomUUID().slice(0, 8)}`;
        const site = (env: Env): Env => {
          const out: Env = {
            ...baseEnv(),
            ...relocate(env, d.workingDir, app),
            CRONWARDEN_BACKEND: 'postgres',
            CRONWARDEN_DATABASE_URL: db.url,
            CRONWARDEN_REDIS_URL: SHARED_REDIS_URL,
            CRONWARDEN_NAMESPACE: namespace,
            CRONWARDEN_ADMIN_HOST: '127.0.0.1',
            CRONWARDEN_ADMIN_PORT: '0',
            ...(env.CRONWARDEN_PROBE_PORT === undefined ? {} : { CRONWARDEN_PROBE_PORT: '0' }),
          };
          delete out.CRONWARDEN_ETCD_ENDPOINTS;
          return out;
        };
        const secrets = { databaseUrl: db.url, adminToken: randomBytes(32).toString('hex') };
        const replicas: LoggedProcess[] = [];
        try {
          const migrated = await run(d.migrate[0]!, d.migrate.slice(1), {
            cwd: app,
            env: site(d.env('migrate', secrets, 'migrate')),
            timeoutMs: 60_000,
          });
          assert.equal(migrated.code, 0, `the migrate command succeeds: ${migrated.stderr}`);
          const tables = await db.pool.query("SELECT 1 FROM information_schema.tables WHERE table_name = 'cw_runs'");
          assert.equal(tables.rowCount, 1, 'the migrate command created the ledger');

          const envA = site(d.env('host-a', secrets));
          const a = new LoggedProcess('A', d.start, { cwd: app, env: envA });
          replicas.push(a);
          const electedA = await a.waitFor('elected leader', 30_000);
          const b = new LoggedProcess('B', d.start, { cwd: app, env: site(d.env('host-b', secrets)) });
          replicas.push(b);
          await b.waitFor('admin HTTP listening', 30_000);
          assert.ok(!b.lines.some((l) => l.msg === 'elected leader'), 'B follows while A leads');
          // A is busy firing when it is told to stop.
          for (
            let i = 0;
            i < 50 &&
            Number(
              (await db.pool.query(`SELECT count(*) AS n FROM "${schemaForNamespace(namespace)}".cw_runs`)).rows[0].n,
            ) === 0;
            i++
          )
            await new Promise((r) => setTimeout(r, 100));

          const sigterm = Date.now();
          a.child.kill('SIGTERM');
          const electedB: LogLine = await b.waitFor('elected leader', 10_000);
          const handoverMs = Number(electedB.time) - sigterm;
          const stopped = await Promise.race([
            a.exited,
            new Promise<'timeout'>((r) => setTimeout(() => r('timeout'), d.stopTimeoutMs)),
          ]);
          const exitMs = Date.now() - sigterm;

          assert.ok(handoverMs < 1000, `B led ${handoverMs} ms after A's SIGTERM`);
          assert.ok(BigInt(String(electedB.token)) > BigInt(String(electedA.token)), 'a newer fencing token');
          assert.notEqual(stopped, 'timeout', `A exited within the stop timeout (${d.stopTimeoutMs} ms)`);
          assert.deepEqual(stopped, { code: 0, signal: null }, `A exited 0 (stderr: ${a.stderr.slice(-1000)})`);
          assert.ok(
            a.lines.some((l) => l.msg === 'replica stopped'),
            'A stopped gracefully',
          );
          const left = processesWithEnv('CRONWARDEN_NAMESPACE', namespace).filter((pid) => pid !== b.child.pid);
          assert.deepEqual(left, [], `no process of A is left (pids ${left.join(', ')})`);
          process.stdout.write(
            `# ${d.file}: lease handed over ${handoverMs} ms after SIGTERM; exit 0 after ${exitMs} ms\n`,
          );

          b.child.kill('SIGTERM');
          assert.deepEqual(await b.exited, { code: 0, signal: null }, 'B exits 0 too');
          assert.deepEqual(
            processesWithEnv('CRONWARDEN_NAMESPACE', namespace),
            [],
            'nothing of the deployment is left',
          );
        } finally {
          for (const r of replicas) await r.kill();
          // A replica that a wrapper (npx, a shell) left behind holds the namespace in its environment.
          for (const pid of processesWithEnv('CRONWARDEN_NAMESPACE', namespace)) process.kill(pid, 'SIGKILL');
          await db.drop();
        }
      },
    );
  }

  it(
    'a TypeScript jobs module: one line naming node --import tsx without a loader; runs under one',
    { timeout: 120_000 },
    async () => {
      const d = systemdDeployment();
      const namespace = `dp${randomUUID().slice(0, 8)}`;
      const db = await createTestDatabase({ schema: schemaForNamespace(namespace) });
      mkdirSync(join(app, 'src'), { recursive: true });
      writeFileSync(
        join(app, 'src', 'jobs.ts'),
        "import { defineJob, type JobContext } from 'cronwarden';\nexport const tick = defineJob({ name: 'tick', schedule: '* * * * *', handler: async (_ctx: JobContext): Promise<void> => {} });\n",
      );
      const env: Env = {
        ...baseEnv(),
        ...d.env('host-ts', { databaseUrl: db.url, adminToken: '' }),
        CRONWARDEN_BACKEND: 'postgres',
        CRONWARDEN_DATABASE_URL: db.url,
        CRONWARDEN_REDIS_URL: SHARED_REDIS_URL,
        CRONWARDEN_NAMESPACE: namespace,
        CRONWARDEN_ADMIN_ENABLED: 'false',
        CRONWARDEN_JOBS: './src/jobs.ts',
      };
      let replica: LoggedProcess | undefined;
      try {
        const plain = await run(d.start[0]!, d.start.slice(1), { cwd: app, env, timeoutMs: 30_000 });
        assert.equal(plain.code, 2, `a configuration error: ${plain.stderr}`);
        assert.equal(plain.stderr.trim().split('\n').length, 1, `one line: ${plain.stderr}`);
        assert.match(
          plain.stderr,
          /^cronwarden: CRONWARDEN_JOBS \(--jobs\): cannot load "\.\/src\/jobs\.ts": .*compile it.*node --import tsx/,
        );

        replica = new LoggedProcess('ts', d.start, { cwd: app, env: { ...env, NODE_OPTIONS: '--import tsx' } });
        const started = await replica.waitFor('replica started', 30_000);
        assert.equal(started.jobs, 1, 'the TypeScript module was loaded');
        replica.child.kill('SIGTERM');
        assert.deepEqual(await replica.exited, { code: 0, signal: null });
      } finally {
        await replica?.kill();
        await db.drop();
      }
    },
  );
});
