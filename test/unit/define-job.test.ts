import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { defineJob, type JobOptions } from '../../src/jobs/define-job.js';
import { JobRegistry, UnknownJobError } from '../../src/jobs/job-registry.js';
import { InvalidArgumentError, InvalidConfigError } from '../../src/errors.js';

const base: JobOptions = { name: 'report', schedule: '0 * * * *', handler: () => {} };
const refuses = (options: unknown, pattern: RegExp) =>
  assert.throws(
    () => defineJob(options as JobOptions),
    (e: Error) => e instanceof InvalidConfigError && pattern.test(e.message),
    `expected ${pattern}`,
  );

describe('defineJob', () => {
  it('fills defaults', () => {
    const job = defineJob(base);
    assert.equal(job.misfire, 'all');
    assert.equal(job.overlap, 'allow');
    assert.equal(job.schedule.timezone, 'UTC');
    assert.equal(job.retries, 0);
    assert.equal(job.catchUpWindowMs, 300_000);
    assert.equal(job.misfireGraceMs, 1000);
    assert.equal(job.jitterMs, 0);
    assert.equal(job.timeoutMs, 0);
    assert.deepEqual(job.backoff, { type: 'exponential', delayMs: 1000 });
    assert.equal(
      new Date(job.schedule.nextAfter(Date.parse('2026-01-01T00:30:00Z'))!).toISOString(),
      '2026-01-01T01:00:00.000Z',
    );
    assert.ok(Object.isFrozen(job));
  });

  it('names the job and the field in every refusal', () => {
    refuses({ ...base, schedule: '99 * * * *' }, /^job "report": schedule: .*minute/);
    refuses({ ...base, timezone: 'Mars/Base' }, /^job "report": timezone: unknown time zone "Mars\/Base"/);
    refuses({ ...base, name: 'has space' }, /^job "has space": name: may contain only/);
    refuses({ ...base, misfire: 'sometimes' }, /^job "report": misfire:/);
    refuses({ ...base, overlap: 'maybe' }, /^job "report": overlap:/);
    refuses({ ...base, retries: -1 }, /^job "report": retries: must not be negative/);
    refuses({ ...base, retries: 1.5 }, /^job "report": retries: must be a whole number/);
    refuses({ ...base, timeoutMs: 8 * 24 * 3600 * 1000 }, /^job "report": timeoutMs: must be at most 7 days/);
    refuses({ ...base, handler: 'not a function' }, /^job "report": handler: must be a function/);
    refuses({ ...base, schedul: '* * * * *' }, /^job "report": schedul/);
    refuses({ ...base, schedule: '? * * * *' }, /^job "report": schedule: .*"\?" is not supported/);
    refuses({ ...base, name: '' }, /^job: name: must not be empty/);
    refuses({ ...base, name: 'x'.repeat(129) }, /name: must be at most 128 characters/);
    refuses({ ...base, catchUpWindowMs: 'soon' }, /^job "report": catchUpWindowMs:/);
    refuses({ ...base, backoff: { type: 'linear', delayMs: 5 } }, /^job "report": backoff\.type:/);
    refuses(
      { ...base, backoff: { type: 'fixed', delayMs: -5 } },
      /^job "report": backoff\.delayMs: must not be negative/,
    );
    refuses({ ...base, retries: 101 }, /^job "report": retries: must be at most 100/);
    refuses(
      { ...base, concurrency: { key: 'api', limit: 0 } },
      /^job "report": concurrency\.limit: must be at least 1/,
    );
    refuses(
      { ...base, concurrency: { key: 'api', limit: 1.5 } },
      /^job "report": concurrency\.limit: must be a whole number/,
    );
    refuses({ ...base, concurrency: { key: 'has space', limit: 2 } }, /^job "report": concurrency\.key:/);
    refuses({ ...base, concurrency: { key: 'api' } }, /^job "report": concurrency\.limit:/);
    refuses({ ...base, concurrency: { key: 'api', limit: 2, max: 3 } }, /^job "report": concurrency: .*max/);
  });

  it('keeps a concurrency limit, its key a string or computed from the run', () => {
    assert.deepEqual(defineJob({ ...base, concurrency: { key: 'crm-api', limit: 3 } }).concurrency, {
      key: 'crm-api',
      limit: 3,
    });
    const perCustomer = defineJob({ ...base, concurrency: { key: (r) => `c-${String(r.payload)}`, limit: 1 } });
    assert.equal(typeof perCustomer.concurrency?.key, 'function');
    assert.equal(defineJob(base).concurrency, undefined);
  });

  it('keeps valid options, reads the schedule in its zone', () => {
    const job = defineJob({
      ...base,
      name: 'billing.eu:daily-1',
      schedule: '30 2 * * *',
      timezone: 'Europe/Berlin',
      misfire: 'latest',
      overlap: 'queue',
      retries: 3,
      backoff: { type: 'fixed', delayMs: 250 },
    });
    assert.equal(job.name, 'billing.eu:daily-1');
    assert.equal(job.misfire, 'latest');
    assert.equal(job.overlap, 'queue');
    assert.equal(job.retries, 3);
    assert.deepEqual(job.backoff, { type: 'fixed', delayMs: 250 });
    assert.equal(
      new Date(job.schedule.nextAfter(Date.parse('2026-01-01T00:00:00Z'))!).toISOString(),
      '2026-01-01T01:30:00.000Z',
    );
  });

  it('a registry refuses duplicate names and names unknown jobs', () => {
    const registry = new JobRegistry([defineJob(base)]);
    assert.throws(
      () => registry.add(defineJob(base)),
      (e: Error) =>
        e instanceof InvalidConfigError && e.setting === 'name' && e.message === 'name: job "report" is defined twice',
    );
    assert.throws(() => new JobRegistry([defineJob(base), defineJob(base)]), InvalidConfigError);
    assert.throws(
      () => registry.require('nope'),
      (e: Error) =>
        e instanceof UnknownJobError && e instanceof InvalidArgumentError && e.message === 'unknown job "nope"',
    );
    assert.equal(registry.get('nope'), undefined);
    registry.add(defineJob({ ...base, name: 'other' }));
    assert.deepEqual(
      registry.list().map((j) => j.name),
      ['report', 'other'],
    );
    assert.equal(registry.require('report').name, 'report');
    assert.equal(registry.size, 2);
  });
});
