/**
 * The package as a consumer installs it, by the docs' own commands (issue 25 #18): the install
 * block of README.md (the same block as docs/operating/deploy.md's) run by bash as written, only
 * its placeholders filled in: a git clone of this checkout, `npm ci && npm pack` (prepack builds),
 * `npm i` of the tarball into a scratch application outside this checkout (the registry is reached
 * for the dependencies). The install warns about no engine, brings no TypeScript tooling and no
 * etcd client, a strict TypeScript consumer type-checks with skipLibCheck off (and `tx` is a real
 * pg client, not `any`), and a JavaScript consumer runs and exits by itself. Getting started's
 * two install blocks run as written too. Prints the install size.
 *
 * The clone is of the committed HEAD, as a reader's would be: uncommitted changes are not in it.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { codeBlocks } from '../docs/markdown.js';
import { repoRoot, run, unpack, type CommandResult } from './support.js';

const { name, version } = JSON.parse(readFileSync(join(repoRoot, 'package.json'), 'utf8')) as {
  name: string;
  version: string;
};

/** The block of `file` marked `<!-- sample: shell <arg> -->`. */
function shellBlock(file: string, arg: string): string {
  const block = codeBlocks(file).find((b) => b.marker?.kind === 'shell' && b.marker.arg === arg);
  assert.ok(block, `${file} marks its block <!-- sample: shell ${arg} -->`);
  return block.code;
}

/** `script` with the docs' placeholders filled in; each must be there, and nothing else like one. */
function filledIn(script: string, values: Record<string, string>): string {
  let out = script;
  for (const [placeholder, value] of Object.entries(values)) {
    assert.ok(out.includes(placeholder), `the block names ${placeholder}`);
    out = out.replaceAll(placeholder, value);
  }
  assert.doesNotMatch(out, /<[a-z][^>]*>/, 'no placeholder left unfilled');
  return out;
}

/** Run a docs block as written, by bash, stopping at the first command that fails. */
const runBlock = (script: string, cwd: string) =>
  run('bash', ['-euo', 'pipefail', '-c', script], { cwd, timeoutMs: 600_000 });

let scratch: string;
let consumer: string;
let tarball: string;
let files: string[];
let install: CommandResult;

before(async () => {
  const readme = shellBlock('README.md', 'install');
  assert.equal(shellBlock('docs/operating/deploy.md', 'install'), readme, 'README and deploy show the same commands');
  // Outside this checkout, so nothing resolves to our own node_modules.
  scratch = mkdtempSync(join(tmpdir(), 'cronwarden-install-'));
  consumer = join(scratch, 'app');
  mkdirSync(consumer);
  writeFileSync(
    join(consumer, 'package.json'),
    JSON.stringify({ name: 'consumer', version: '1.0.0', private: true, type: 'module' }, null, 2),
  );
  install = await runBlock(
    filledIn(readme, {
      '<url of this repository>': repoRoot,
      '/path/to/your/app': consumer,
      '/path/to/cronwarden': join(scratch, 'cronwarden'),
    }),
    scratch,
  );
  tarball = join(scratch, 'cronwarden', `${name}-${version}.tgz`);
  const listing = existsSync(tarball) ? await run('tar', ['-tzf', tarball], { cwd: scratch }) : undefined;
  files = (listing?.stdout ?? '')
    .split('\n')
    .filter(Boolean)
    .map((f) => f.replace(/^package\//, ''));
});

after(() => {
  if (scratch) rmSync(scratch, { recursive: true, force: true });
});

const installed = (name: string) => existsSync(join(consumer, 'node_modules', name));

describe('the package installed by the commands in the README, as written', () => {
  it('the commands run, and the tarball ships dist, migrations, bin and LICENSE; no source maps, no src', () => {
    assert.equal(install.code, 0, `${install.stdout.slice(-2000)}${install.stderr.slice(-3000)}`);
    assert.ok(files.includes('LICENSE'));
    assert.ok(files.includes('dist/index.js') && files.includes('dist/index.d.ts'));
    assert.ok(files.includes('bin/cronwarden.js'));
    assert.ok(files.some((f) => f.startsWith('migrations/')));
    assert.deepEqual(
      files.filter((f) => f.endsWith('.map')),
      [],
      'no source maps (they would point at the unshipped src/)',
    );
    assert.deepEqual(
      files.filter((f) => f.startsWith('src/') || f.startsWith('test/')),
      [],
    );
  });

  it('warns about no engine, and installs without tsx, esbuild, etcd3 or pino-pretty; size reported', async () => {
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

    const bare = join(scratch, 'bare');
    await unpack(tarball, bare);
    rmSync(join(bare, 'dist'), { recursive: true });
    const missing = await run(process.execPath, [join(bare, 'bin', 'cronwarden.js'), '--version'], { cwd: bare });
    assert.equal(missing.code, 2);
    assert.match(missing.stderr, /^cronwarden: .*dist\/cli\/main\.js is missing: run `npm run build`/);
  });

  it("getting started's two install blocks run as written: a clone, its tarball, an app with cronwarden and tsx", async () => {
    const dir = mkdtempSync(join(tmpdir(), 'cronwarden-getting-started-'));
    try {
      const guide = 'docs/getting-started.md';
      const script = [shellBlock(guide, 'install-clone'), shellBlock(guide, 'install-app')].join('\n');
      const r = await runBlock(filledIn(script, { '<url of this repository>': repoRoot }), dir);
      assert.equal(r.code, 0, `${r.stdout.slice(-2000)}${r.stderr.slice(-3000)}`);
      const app = join(dir, 'app');
      const v = await run('npx', ['cronwarden', '--version'], { cwd: app });
      assert.equal(v.code, 0, v.stderr);
      assert.equal(v.stdout.trim(), version);
      // The guide's jobs.ts, loaded through tsx as its replicas load it.
      const jobs = codeBlocks(guide).find((b) => b.marker?.kind === 'run' && b.lang === 'ts');
      assert.ok(jobs, "the guide's jobs.ts sample");
      writeFileSync(join(app, 'jobs.ts'), jobs.code);
      const load = "const m = await import('./jobs.ts'); console.log(Object.values(m).map((j) => j.name).join());";
      const loaded = await run(process.execPath, ['--import', 'tsx', '--input-type=module', '-e', load], { cwd: app });
      assert.equal(loaded.code, 0, loaded.stderr);
      assert.equal(loaded.stdout.trim(), 'hello');
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
