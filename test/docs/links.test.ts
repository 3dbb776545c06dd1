/**
 * Every relative link and #anchor in README.md and docs/ points at a file or heading that exists.
 * remark-validate-links does the work (offline, GitHub's heading slugs, headings in other files
 * too when run through remark-cli's engine over the whole set), so this test only runs it and
 * reads its report.
 */
import { it } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { join } from 'node:path';
import { docFiles, repoRoot } from './markdown.js';

it('every relative link and anchor in README.md and docs/ resolves', () => {
  const files = docFiles();
  const r = spawnSync(
    join(repoRoot, 'node_modules', '.bin', 'remark'),
    [
      '--no-config',
      '--no-ignore',
      '--no-stdout',
      '--no-color',
      '--quiet',
      '--frail',
      // No Git remote needed: links are checked against the files in this checkout.
      '--use',
      'remark-validate-links=repository:false',
      ...files,
    ],
    { cwd: repoRoot, encoding: 'utf8' },
  );
  process.stdout.write(`# docs: links checked in ${files.length} files\n`);
  assert.ok(files.length >= 20, `only ${files.length} Markdown files found`);
  assert.equal(r.status, 0, `remark-validate-links reported:\n${r.stderr}${r.stdout}`);
});
