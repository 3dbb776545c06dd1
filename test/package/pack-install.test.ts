/**
 * The package as a consumer installs it: `npm pack` (prepack builds), then `npm i --omit=dev` of
 * the tarball into a scratch project outside this checkout (the registry is reached for the
 * dependencies). The install warns about no engine, brings no TypeScript tooling and no etcd
 * client, a strict TypeScript consumer type-checks with skipLibCheck off (and `tx` is a real pg
 * client, not `any`), and a JavaScript consumer runs and exits by itself. Prints the install size.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { packPackage, repoRoot, run, unpack, type CommandResult, type Packed } from './support.js';

let packed: Packed;
let consumer: string;
let install: CommandResult;

before(async () => {
  packed = await packPackage();
  // Outside this checkout, so nothing resolves to our own node_modules.
  consumer = mkdtempSync(join(tmpdir(), 'cronwarden-consumer-'));
  writeFileSync(
    join(consumer, 'package.json'),
    JSON.stringify({ name: 'consumer', version: '1.0.0', private: true, type: 'module' }, null, 2),
  );
  install = await run('npm', ['i', '--omit=dev', '--no-audit', '--no-fund', '--prefer-offline', packed.tarball], {
    cwd: consumer,
    timeoutMs: 300_000,
  });
});

after(() => {
  if (packed) rmSync(packed.dir, { recursive: true, force: true });
  if (consumer) rmSync(consumer, { recursive: true, force: true });
});

const installed = (name: string) => existsSync(join(consumer, 'node_modules', name));

describe('the packed package in a consumer (npm i --omit=dev of the tarball)', () => {
  it('ships dist, migrations, bin and LICENSE; no source maps, no src', () => {
    assert.ok(packed.files.includes('LICENSE'));
    assert.ok(packed.files.includes('dist/index.js') && packed.files.includes('dist/index.d.ts'));
    assert.ok(packed.files.includes('bin/cronwarden.js'));
    assert.ok(packed.files.some((f) => f.startsWith('migrations/')));
    assert.deepEqual(
      packed.files.filter((f) => f.endsWith('.map')),
      [],
      'no source maps (they would point at the unshipped src/)',
    );
    assert.deepEqual(
      packed.files.filter((f) => f.startsWith('src/') || f.startsWith('test/')),
      [],
    );
  });

  it('installs with no engine warning and without tsx, esbuild, etcd3 or pino-pretty; size reported', async () => {
    assert.equal(install.code, 0, install.stderr);
    const output = install.stdout + install.stderr;
    assert.doesNotMatch(output, /EBADENGINE|Unsupported engine|engine/i, output);
    for (const name of [
      'tsx',
      'esbuild',
      '@esbuild',
      'etcd3',
      '@grpc/grpc-js',
      'protobufjs',
      'typescript',
      'pino-pretty',
    ]) {
      assert.ok(!installed(name), `${name} is not installed for a consumer`);
    }
    assert.ok(installed('cronwarden') && installed('@types/pg'), 'cronwarden and the types its API needs');
    const du = await run('du', ['-sk', 'node_modules'], { cwd: consumer });
    const ls = await run('npm', ['ls', '--all', '--parseable', '--omit=dev'], { cwd: consumer });
    const packages = ls.stdout.trim().split('\n').length - 1; // the first line is the consumer itself
    const mb = Number(du.stdout.split('\t')[0]) / 1024;
    process.stdout.write(`# consumer install: ${mb.toFixed(0)} MB node_modules, ${packages} packages\n`);
    assert.ok(packages > 0 && mb > 0);
  });

  it('a strict TypeScript consumer type-checks with skipLibCheck off; tx is a pg client, not any', async () => {
    const dir = join(consumer, 'ts');
    mkdirSync(dir, { recursive: true });
    writeFileSync(
      join(dir, 'tsconfig.json'),
      JSON.stringify({
        compilerOptions: {
          strict: true,
          skipLibCheck: false,
          noEmit: true,
          target: 'ES2022',
          module: 'NodeNext',
          moduleResolution: 'NodeNext',
          noUncheckedIndexedAccess: true,
        },
        files: ['consumer.ts'],
      }),
    );
    writeFileSync(join(dir, 'package.json'), JSON.stringify({ type: 'module' }));
    writeFileSync(
      join(dir, 'consumer.ts'),
      `import { defineJob, MemoryLeaseBackend, withLock, type JobContext, type LeaseBackend } from 'cronwarden';

export const invoices = defineJob({
  name: 'invoices',
  schedule: '30 2 * * *',
  handler: async (ctx: JobContext) => {
    const token: bigint = ctx.fencingToken;
    await ctx.transaction(async (tx) => {
      const result = await tx.query<{ n: number }>('SELECT $1::int AS n', [token.toString()]);
      const n: number | undefined = result.rows[0]?.n;
      // @ts-expect-error a pg client's query takes SQL text or a query config, not a number
      await tx.query(42);
      // @ts-expect-error a pg client has no such method; if tx were any, this line would compile
      tx.noSuchMethod();
      return n;
    });
  },
});

const backend: LeaseBackend = new MemoryLeaseBackend();
await withLock(backend, { name: 'rebuild', holder: 'me', ttlMs: 10_000 }, async ({ token }) => token + 1n);
await backend.close();
`,
    );
    const tsc = join(repoRoot, 'node_modules', 'typescript', 'bin', 'tsc');
    const r = await run(process.execPath, [tsc, '-p', join(dir, 'tsconfig.json')], { cwd: dir, timeoutMs: 120_000 });
    assert.equal(r.code, 0, `tsc: ${r.stdout}${r.stderr}`);

    // The same file with the expect-error lines gone must fail: the check has teeth.
    writeFileSync(
      join(dir, 'wrong.ts'),
      `import type { TransactionClient } from 'cronwarden';\nexport const f = (tx: TransactionClient) => tx.noSuchMethod();\n`,
    );
    writeFileSync(
      join(dir, 'tsconfig.wrong.json'),
      JSON.stringify({ extends: './tsconfig.json', files: ['wrong.ts'] }),
    );
    const wrong = await run(process.execPath, [tsc, '-p', join(dir, 'tsconfig.wrong.json')], {
      cwd: dir,
      timeoutMs: 120_000,
    });
    assert.notEqual(wrong.code, 0);
    assert.match(wrong.stdout, /Property 'noSuchMethod' does not exist on type 'PoolClient'/);
  });

  it('a JavaScript consumer runs a lease round-trip and exits 0; etcd without etcd3 is a clear error', async () => {
    writeFileSync(
      join(consumer, 'consumer.js'),
      `import { defineJob, MemoryLeaseBackend, createLeaseBackend, InvalidConfigError } from 'cronwarden';

const job = defineJob({ name: 'tick', schedule: '*/5 * * * *', handler: async () => {} });
const backend = new MemoryLeaseBackend();
const lease = await backend.acquire({ name: 'report', holder: 'consumer', ttlMs: 5000 });
const held = await backend.current('report');
await backend.release(lease);
const after = await backend.current('report');
await backend.close();
let etcd;
try {
  await createLeaseBackend({ kind: 'etcd', endpoints: ['http://127.0.0.1:2379'] });
  etcd = 'created';
} catch (err) {
  etcd = { invalidConfig: err instanceof InvalidConfigError, message: err.message };
}
console.log(JSON.stringify({ job: job.name, token: lease.token.toString(), held: held?.holder, after, etcd }));
`,
    );
    const r = await run(process.execPath, ['consumer.js'], { cwd: consumer, timeoutMs: 30_000 });
    assert.equal(r.code, 0, r.stderr);
    const out = JSON.parse(r.stdout) as {
      job: string;
      token: string;
      held: string;
      after: unknown;
      etcd: { invalidConfig: boolean; message: string };
    };
    assert.equal(out.job, 'tick');
    assert.ok(BigInt(out.token) > 0n);
    assert.equal(out.held, 'consumer');
    assert.equal(out.after, null, 'released');
    assert.equal(out.etcd.invalidConfig, true);
    assert.match(out.etcd.message, /npm i etcd3/);
  });

  it('the bin runs from dist without TypeScript tooling, and says to build when dist is missing', async () => {
    const version = await run(join(consumer, 'node_modules', '.bin', 'cronwarden'), ['--version'], { cwd: consumer });
    assert.equal(version.code, 0, version.stderr);
    assert.equal(
      version.stdout.trim(),
      (JSON.parse(readFileSync(join(repoRoot, 'package.json'), 'utf8')) as { version: string }).version,
    );

    const bare = join(packed.dir, 'bare');
    await unpack(packed.tarball, bare);
    rmSync(join(bare, 'dist'), { recursive: true });
    const missing = await run(process.execPath, [join(bare, 'bin', 'cronwarden.js'), '--version'], { cwd: bare });
    assert.equal(missing.code, 2);
    assert.match(missing.stderr, /^cronwarden: .*dist\/cli\/main\.js is missing: run `npm run build`/);
  });
});
