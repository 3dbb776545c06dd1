/**
 * The log formats: `json` (the default) writes one JSON object a line; `--log-format pretty`
 * writes a person's line through pino-pretty (an optional peer dependency, installed here as a
 * dev dependency); any other format is refused with the choices named.
 */
import { it } from 'node:test';
import assert from 'node:assert/strict';
import { Writable } from 'node:stream';
import { setTimeout as sleep } from 'node:timers/promises';
import { createLogger } from '../../src/config/logger.js';
import { loadReplicaConfig } from '../../src/config/replica-config.js';

const env = {
  CRONWARDEN_BACKEND: 'redis',
  CRONWARDEN_BACKEND_URL: 'redis://127.0.0.1:6379',
  CRONWARDEN_DATABASE_URL: 'postgres://127.0.0.1/test',
  CRONWARDEN_REDIS_URL: 'redis://127.0.0.1:6379',
  CRONWARDEN_JOBS: './jobs.js',
};

/** A stream that keeps what is written to it. */
function capture(): { stream: Writable; text: () => string } {
  const chunks: string[] = [];
  const stream = new Writable({
    write(chunk: Buffer, _enc, done) {
      chunks.push(chunk.toString());
      done();
    },
  });
  return { stream, text: () => chunks.join('') };
}

const finished = { job: 'nightly', runId: '42', attempt: 1, outcome: 'completed', durationMs: 12, token: '7' };

it('json is the default format: one JSON object a line', async () => {
  const config = loadReplicaConfig({}, env);
  assert.equal(config.logFormat, 'json');
  const out = capture();
  const logger = await createLogger(config, out.stream);
  logger.info(finished, 'run attempt finished');
  await sleep(50);
  const line = JSON.parse(out.text().trim()) as Record<string, unknown>;
  assert.equal(line.msg, 'run attempt finished');
  assert.equal(line.runId, '42');
  assert.equal(line.level, 30);
});

it('--log-format pretty writes a line for a person: time, level, message, then the fields', async () => {
  const config = loadReplicaConfig({ logFormat: 'pretty' }, env);
  assert.equal(config.logFormat, 'pretty');
  const out = capture();
  const logger = await createLogger(config, out.stream);
  logger.info(finished, 'run attempt finished');
  logger.debug({ job: 'hidden' }, 'below the level');
  await sleep(100);
  const text = out.text();
  assert.throws(() => JSON.parse(text), 'not JSON');
  assert.match(text, /^\[\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2}\.\d{3} [+-]\d{4}\] INFO: run attempt finished\n/);
  assert.match(text, /^ {4}job: "nightly"$/m);
  assert.match(text, /^ {4}runId: "42"$/m);
  assert.match(text, /^ {4}outcome: "completed"$/m);
  assert.doesNotMatch(text, /hidden|pid:/);
});

it('an unknown log format is refused, naming the choices', () => {
  assert.throws(
    () => loadReplicaConfig({}, { ...env, CRONWARDEN_LOG_FORMAT: 'xml' }),
    /CRONWARDEN_LOG_FORMAT.*must be one of json, pretty/,
  );
});
