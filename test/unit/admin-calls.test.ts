/**
 * The admin thread's calls (src/admin/admin-calls.ts): the worker's callers and the main thread's
 * dispatch both come from one map, so every entry must arrive at the method of its name, on the
 * object it names, with its arguments, and its answer must come back. The message crosses by
 * structured clone, as postMessage sends it.
 */
import { it } from 'node:test';
import assert from 'node:assert/strict';
import { adminCalls, answerCall, remoteCalls, type CallTargets } from '../../src/admin/admin-calls.js';

/** An object whose every method records its call (and whether `this` was the object) and answers with its name. */
function recorder(group: string, log: string[]): never {
  const target: object = new Proxy(
    {},
    {
      get: (_, op) =>
        async function (this: unknown, ...args: unknown[]) {
          log.push(`${group}.${String(op)}(${args.map(String).join(', ')})${this === target ? '' : ' without this'}`);
          return `${group}.${String(op)}`;
        },
    },
  );
  return target as never;
}

it('every call of the map reaches the method of its name on the object it names, and its answer returns', async () => {
  const log: string[] = [];
  const targets: CallTargets = {
    replica: recorder('replica', log),
    runtime: recorder('runtime', log),
    lease: recorder('lease', log),
  };
  const remote = remoteCalls((call) => answerCall(targets, structuredClone(call)));
  const expected: string[] = [];
  for (const group of ['replica', 'runtime', 'lease'] as const) {
    for (const op of Object.keys(adminCalls[group])) {
      const fn = (remote[group] as Record<string, (...a: unknown[]) => Promise<unknown>>)[op]!;
      assert.equal(await fn('x', 7n), `${group}.${op}`);
      expected.push(`${group}.${op}(x, 7)`);
    }
  }
  assert.deepEqual(log, expected);
  assert.equal(log.length, 16, 'nine replica actions, six runtime calls, the lease read');
});

it('a replica without runtime schedules refuses their calls; the replica actions still answer', async () => {
  const log: string[] = [];
  const targets: CallTargets = { replica: recorder('replica', log), runtime: undefined, lease: recorder('lease', log) };
  const remote = remoteCalls((call) => answerCall(targets, structuredClone(call)));
  await assert.rejects(remote.runtime.delete('s1', 'admin'), /runtime schedules are not served here/);
  assert.equal(await remote.replica.resign(), 'replica.resign');
  assert.deepEqual(log, ['replica.resign()']);
});
