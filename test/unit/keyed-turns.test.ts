import { it } from 'node:test';
import assert from 'node:assert/strict';
import { KeyedTurns } from '../../src/ledger/keyed-turns.js';

const tick = () => new Promise((r) => setImmediate(r));

it('calls of one key run one at a time, in order; other keys do not wait', async () => {
  const turns = new KeyedTurns();
  const log: string[] = [];
  const gate: Record<string, () => void> = {};
  const call = (key: string, name: string) =>
    turns.run(key, async () => {
      log.push(`start ${name}`);
      await new Promise<void>((r) => (gate[name] = r));
      log.push(`end ${name}`);
      return name;
    });
  const a1 = call('a', 'a1');
  const a2 = call('a', 'a2');
  const b1 = call('b', 'b1');
  await tick();
  assert.deepEqual(log, ['start a1', 'start b1']);
  gate.b1!();
  assert.equal(await b1, 'b1');
  assert.deepEqual(log, ['start a1', 'start b1', 'end b1'], 'a2 still waits for a1');
  gate.a1!();
  assert.equal(await a1, 'a1');
  await tick();
  assert.deepEqual(log.slice(3), ['end a1', 'start a2']);
  gate.a2!();
  assert.equal(await a2, 'a2');
  assert.equal(turns.busyKeys, 0, 'idle keys are dropped');
});

it('a call that fails passes its turn on, and its error to its caller only', async () => {
  const turns = new KeyedTurns();
  const failed = turns.run('k', async () => {
    await tick();
    throw new Error('boom');
  });
  const next = turns.run('k', async () => 'next');
  await assert.rejects(failed, /boom/);
  assert.equal(await next, 'next');
  assert.equal(turns.busyKeys, 0);
});
