/**
 * The shipped Prometheus alert rules (deploy/prometheus/alerts.yml) pass `promtool check rules`
 * and their unit tests (alerts.test.yml) pass `promtool test rules`; a copy with a broken
 * expression fails the check and a copy with a changed threshold fails the unit tests, so the two
 * commands really look at the files. promtool comes with Debian's `prometheus` package
 * (scripts/install-deps.sh).
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { copyFileSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { repoRoot } from './support.js';

const rulesDir = join(repoRoot, 'deploy', 'prometheus');

function promtool(...args: string[]): { status: number | null; output: string } {
  const res = spawnSync('promtool', args, { encoding: 'utf8', timeout: 60_000 });
  if (res.error) throw new Error(`promtool could not run (${res.error.message}): run scripts/install-deps.sh`);
  return { status: res.status, output: `${res.stdout}${res.stderr}` };
}

describe('Prometheus alert rules', () => {
  let scratch: string;
  before(() => {
    scratch = mkdtempSync(join(tmpdir(), 'cw-rules-'));
  });
  after(() => rmSync(scratch, { recursive: true, force: true }));

  /** A copy of the rules and their tests with `edit` applied to the rules. */
  function brokenCopy(edit: (rules: string) => string): string {
    const dir = mkdtempSync(join(scratch, 'copy-'));
    const rules = readFileSync(join(rulesDir, 'alerts.yml'), 'utf8');
    const changed = edit(rules);
    assert.notEqual(changed, rules, 'the edit must change the rules');
    writeFileSync(join(dir, 'alerts.yml'), changed);
    copyFileSync(join(rulesDir, 'alerts.test.yml'), join(dir, 'alerts.test.yml'));
    return dir;
  }

  it('promtool check rules accepts alerts.yml', () => {
    const res = promtool('check', 'rules', join(rulesDir, 'alerts.yml'));
    assert.equal(res.status, 0, res.output);
    assert.match(res.output, /SUCCESS: \d+ rules found/);
  });

  it('promtool test rules passes alerts.test.yml', () => {
    const res = promtool('test', 'rules', join(rulesDir, 'alerts.test.yml'));
    assert.equal(res.status, 0, res.output);
    assert.match(res.output, /SUCCESS/);
  });

  it('promtool check rules refuses a rule whose expression does not parse', () => {
    const dir = brokenCopy((rules) => rules.replace('> 0\n', '> \n'));
    const res = promtool('check', 'rules', join(dir, 'alerts.yml'));
    assert.notEqual(res.status, 0, res.output);
    assert.match(res.output, /FAILED|parse error/i);
  });

  it('promtool test rules fails when a threshold changes under the tests', () => {
    const dir = brokenCopy((rules) =>
      rules.replace('(cronwarden_job_consecutive_failures) >= 3', '(cronwarden_job_consecutive_failures) >= 5'),
    );
    assert.equal(promtool('check', 'rules', join(dir, 'alerts.yml')).status, 0, 'the copy is still valid');
    const res = promtool('test', 'rules', join(dir, 'alerts.test.yml'));
    assert.notEqual(res.status, 0, res.output);
    assert.match(res.output, /CronwardenJobFailing/);
  });
});
