/**
 * OpenTelemetry: with an SDK registered (sdk-trace-base's in-memory exporter), a run is followed
 * from the leader's fire commit to the attempt that ran it: the commit span is the fire span's
 * parent, the fire span (the run's id, job, leader token) is the attempt span's parent across
 * BullMQ (its traceparent rides in the queued job), and the attempt span carries the run id, job,
 * attempt, execution token and outcome. In-process replica, memory lease backend, real
 * PostgreSQL, Redis and BullMQ.
 */
import { after, before, it } from 'node:test';
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { trace, SpanKind, SpanStatusCode } from '@opentelemetry/api';
import { BasicTracerProvider, InMemorySpanExporter, SimpleSpanProcessor } from '@opentelemetry/sdk-trace-base';
import type { ReadableSpan } from '@opentelemetry/sdk-trace-base';
import { pino } from 'pino';
import { defineJob } from '../../src/jobs/define-job.js';
import { MemoryLeaseBackend, MemoryLeaseStore } from '../../src/locks/memory.js';
import { Replica } from '../../src/replica/replica.js';
import { createTestDatabase, type TestDatabase } from '../support/postgres-database.js';
import { SHARED_REDIS_URL, waitForRole } from './support.js';

const exporter = new InMemorySpanExporter();
const provider = new BasicTracerProvider({ spanProcessors: [new SimpleSpanProcessor(exporter)] });
let db: TestDatabase;
let replica: Replica;

before(async () => {
  trace.setGlobalTracerProvider(provider);
  db = await createTestDatabase();
  replica = new Replica({
    replicaId: 'traced-a',
    namespace: `trc${randomUUID().slice(0, 8)}`,
    schema: db.schema,
    backend: new MemoryLeaseBackend({ store: new MemoryLeaseStore() }),
    databaseUrl: db.url,
    redisUrl: SHARED_REDIS_URL,
    jobs: [
      defineJob({ name: 'traced', schedule: '* * * * * *', handler: async () => {} }),
      defineJob({
        name: 'fails',
        schedule: '* * * * * *',
        handler: async () => {
          throw new Error('fails on purpose');
        },
      }),
    ],
    election: { ttlMs: 3000 },
    shutdownGraceMs: 1000,
    version: 'test',
    logger: pino({ level: 'silent' }),
  });
  await replica.start();
  await waitForRole(replica, 'leader');
});
after(async () => {
  await replica.stop();
  await db.drop();
  await provider.shutdown();
  trace.disable();
});

const attr = (span: ReadableSpan, key: string) => span.attributes[`cronwarden.${key}`];

/** The attempt spans of `job` once there are some, with every span exported so far. */
async function attemptsOf(job: string, timeoutMs = 30_000): Promise<{ attempts: ReadableSpan[]; all: ReadableSpan[] }> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const all = exporter.getFinishedSpans();
    const attempts = all.filter((s) => s.name === 'cronwarden.attempt' && attr(s, 'job') === job);
    if (attempts.length > 0) return { attempts, all };
    if (Date.now() > deadline)
      throw new Error(`no attempt span of ${job} within ${timeoutMs} ms (${all.length} spans)`);
    await new Promise((r) => setTimeout(r, 200));
  }
}

it('a run is followed from the fire commit span to the attempt span', async () => {
  const { attempts, all } = await attemptsOf('traced');
  const attempt = attempts[0]!;
  const runId = attr(attempt, 'run_id');
  assert.match(String(runId), /^\d+$/);
  assert.equal(attempt.kind, SpanKind.CONSUMER);
  assert.equal(attr(attempt, 'outcome'), 'completed');
  assert.equal(attr(attempt, 'attempt'), 1);
  assert.match(String(attr(attempt, 'execution_token')), /^\d+$/);

  const fire = all.find((s) => s.name === 'cronwarden.fire' && attr(s, 'run_id') === runId);
  assert.ok(fire, `a fire span for run ${String(runId)}`);
  assert.equal(fire.kind, SpanKind.PRODUCER);
  assert.equal(attr(fire, 'job'), 'traced');
  assert.match(String(attr(fire, 'leader_token')), /^\d+$/);
  // Parent across the queue: same trace, the fire span is the attempt's parent.
  assert.equal(attempt.spanContext().traceId, fire.spanContext().traceId);
  assert.equal(attempt.parentSpanContext?.spanId, fire.spanContext().spanId);
  assert.equal(attempt.parentSpanContext?.isRemote, true);

  const commit = all.find((s) => s.spanContext().spanId === fire.parentSpanContext?.spanId);
  assert.ok(commit, 'the fire span has its commit span as parent');
  assert.equal(commit.name, 'cronwarden.fire.commit');
  assert.equal(attr(commit, 'outcome'), 'committed');
  assert.equal(attr(commit, 'leader_token'), attr(fire, 'leader_token'));
  assert.equal(attr(commit, 'replica'), 'traced-a');
});

it('a failed attempt span says so, with the error', async () => {
  const { attempts } = await attemptsOf('fails');
  const failed = attempts[0]!;
  assert.equal(attr(failed, 'outcome'), 'failed');
  assert.equal(failed.status.code, SpanStatusCode.ERROR);
  assert.equal(failed.status.message, 'fails on purpose');
  assert.ok(failed.events.some((e) => e.name === 'exception'));
  assert.ok(failed.parentSpanContext, 'it too continues its fire');
});
