/**
 * Every TypeScript sample in README.md and docs/, and every examples/*.ts, compiles strict against
 * the sources; the samples marked `run` and every example also run (against the local PostgreSQL
 * and Redis) and exit 0. So the docs cannot drift from the code unnoticed.
 */
import { after, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { mkdirSync, rmSync, writeFileSync } from 'node:fs';
import { basename, join } from 'node:path';
import { codeBlocks, docFiles, exampleFiles, isTypeScript, repoRoot, where, type CodeBlock } from './markdown.js';
import { typeCheck, type SampleSource } from './typecheck.js';
import { runTs, runWithServers } from './run-sample.js';

const blocks = docFiles().flatMap(codeBlocks).filter(isTypeScript);
const skipped = blocks.filter((b) => b.marker?.kind === 'skip');
const checked = blocks.filter((b) => b.marker?.kind !== 'skip');
const examples = exampleFiles();

/** A handler's body, compiled where a handler would be. */
const FRAGMENT_PRELUDE = [
  "import { defineJob } from 'cronwarden';",
  "export const sample = defineJob({ name: 'sample', schedule: '* * * * *', handler: async (ctx) => {",
];

function sampleSource(b: CodeBlock): SampleSource {
  if (b.marker?.kind === 'fragment') {
    return {
      label: b.file,
      text: [...FRAGMENT_PRELUDE, b.code, '} });', ''].join('\n'),
      preludeLines: FRAGMENT_PRELUDE.length,
      firstLine: b.line,
    };
  }
  // `export {}` keeps each sample a module of its own, whatever it declares.
  return { label: b.file, text: `${b.code}\nexport {};\n`, preludeLines: 0, firstLine: b.line };
}

describe('docs samples and examples', () => {
  it('compile, strict, against the sources', () => {
    process.stdout.write(
      `# docs samples: ${checked.length} of ${blocks.length} TypeScript blocks compiled, ${skipped.length} skipped` +
        ` (${skipped.map((b) => where(b)).join(', ') || 'none'}); ${examples.length} examples compiled\n`,
    );
    assert.ok(checked.length >= 15, `only ${checked.length} samples found: is the marker parsing broken?`);
    for (const b of skipped) assert.ok(b.marker!.arg.length > 0, `${where(b)}: a skip says why`);
    const problems = typeCheck([
      ...checked.map(sampleSource),
      ...examples.map((e) => ({ label: e, text: '', preludeLines: 0, firstLine: 1, path: join(repoRoot, e) })),
    ]);
    assert.deepEqual(problems, [], `\n${problems.join('\n')}`);
  });

  const scratch = join(repoRoot, '.tmp', 'docs-samples');
  after(() => rmSync(scratch, { recursive: true, force: true }));

  for (const b of blocks.filter((x) => x.marker?.kind === 'run')) {
    it(`runs the sample at ${where(b)}`, async () => {
      mkdirSync(scratch, { recursive: true });
      const file = join(scratch, `${basename(b.file, '.md')}-${b.line}.ts`);
      writeFileSync(file, b.code);
      const r = await runTs(file, {}, 60_000);
      assert.equal(r.code, 0, `exit ${r.code ?? r.signal}\n${r.stdout}\n${r.stderr}`);
    });
  }

  for (const e of examples) {
    it(`runs ${e}`, async () => {
      const r = await runWithServers(join(repoRoot, e));
      assert.equal(r.code, 0, `exit ${r.code ?? r.signal}\n${r.stdout.slice(-4000)}\n${r.stderr.slice(-4000)}`);
    });
  }
});
