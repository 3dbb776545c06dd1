import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { getEventListeners } from 'node:events';
import { unwatchAbort, watchAbort } from '../../src/jobs/abort-watch.js';

describe('abort watch: many watchers of one signal', () => {
  it('calls each watcher still watching once, in order, through one listener on the signal', () => {
    const c = new AbortController();
    const calls: string[] = [];
    const fns = ['a', 'b', 'c', 'd'].map((n) => () => calls.push(n));
    for (const f of fns) watchAbort(c.signal, f);
    unwatchAbort(c.signal, fns[1]!);
    assert.equal(getEventListeners(c.signal, 'abort').length, 1, 'one listener, whatever the watchers');
    c.abort();
    c.abort();
    assert.deepEqual(calls, ['a', 'c', 'd']);
    assert.equal(getEventListeners(c.signal, 'abort').length, 0);
    unwatchAbort(c.signal, fns[0]!); // after the abort: nothing to do, no error
  });

  it('calls a watcher of an aborted signal at once; a thousand watched and unwatched leave nothing behind', () => {
    const c = new AbortController();
    c.abort();
    let called = 0;
    watchAbort(c.signal, () => called++);
    assert.equal(called, 1);

    const d = new AbortController();
    for (let i = 0; i < 1000; i++) {
      const f = () => called++;
      watchAbort(d.signal, f);
      unwatchAbort(d.signal, f);
    }
    d.abort();
    assert.equal(called, 1, 'no unwatched watcher was called');
  });
});
