import { it } from 'node:test';
import assert from 'node:assert/strict';
import {
  ConnectionClosedError,
  CronwardenError,
  DrillError,
  InvalidArgumentError,
  ServerNotReadyError,
  ShuttingDownError,
  TimedOutError,
  UnexpectedReplyError,
} from '../../src/errors.js';
import { ReplicaLink } from '../../src/drill/replica-link.js';

it('the errors that replaced bare Errors: named, in the family, with a message and whether a retry helps', () => {
  const cases: [CronwardenError, string, RegExp, boolean][] = [
    [new TimedOutError('range candidates', 400), 'TimedOutError', /^range candidates: no answer within 400 ms$/, true],
    [new ConnectionClosedError('LISTEN connection ended'), 'ConnectionClosedError', /^LISTEN connection ended$/, true],
    [
      new UnexpectedReplyError('renew-1.lua', 'code 7'),
      'UnexpectedReplyError',
      /^renew-1\.lua returned code 7, which this version/,
      false,
    ],
    // The executor records an interrupted attempt with this text; graceful-shutdown tests match it.
    [new ShuttingDownError(), 'ShuttingDownError', /^replica shutting down$/, true],
    [
      new ShuttingDownError('handler abandoned'),
      'ShuttingDownError',
      /^replica shutting down: handler abandoned$/,
      true,
    ],
    [
      new ServerNotReadyError('redis', 'no PONG within 500 ms'),
      'ServerNotReadyError',
      /^redis not ready: no PONG within 500 ms$/,
      true,
    ],
    [
      new DrillError('no fire committed within 60 s of starting the replicas'),
      'DrillError',
      /^no fire committed/,
      false,
    ],
  ];
  for (const [err, name, message, retryable] of cases) {
    assert.ok(err instanceof CronwardenError && err instanceof Error, name);
    assert.equal(err.name, name);
    assert.match(err.message, message);
    assert.equal(err.retryable, retryable, `${name}.retryable`);
  }
});

it('the drill refuses to cut the link of an in-process backend with an InvalidArgumentError', async () => {
  await assert.rejects(
    ReplicaLink.open({ kind: 'memory' }, Math.random),
    (err: Error) => err instanceof InvalidArgumentError && /in-process/.test(err.message),
  );
});
