/**
 * LedgerClock on a driven host clock and a scripted server: it keeps the server's time across
 * host wall-clock jumps, picks the sample with the shortest round trip, and reports the offset.
 */
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { LedgerClock } from '../../src/scheduler/election/ledger-clock.js';

/** A host whose wall clock can be set anywhere while its monotonic clock only moves forward. */
class Host {
  mono = 1_000;
  wallOffset = 0;
  now = () => 1_700_000_000_000 + this.mono + this.wallOffset;
  monotonic = () => this.mono;
}

describe('LedgerClock', () => {
  it('follows the server clock, not the host wall clock, and ignores host jumps between syncs', async () => {
    const host = new Host();
    host.wallOffset = 5 * 60_000; // this host runs five minutes fast
    const serverAt = (mono: number) => 1_700_000_000_000 + mono;
    const clock = new LedgerClock({
      host,
      samples: 1,
      readServerTime: async () => {
        host.mono += 10; // request on the wire
        const t = serverAt(host.mono);
        host.mono += 10; // answer on the wire
        return t;
      },
    });
    const sync = await clock.sync();
    assert.equal(sync.errorMs, 20, 'the read may have been anywhere in the 20 ms round trip');
    assert.equal(sync.hostOffsetMs, 5 * 60_000, 'reported against the middle of the round trip');
    // The server read its clock in the middle: the clock counts from the value read, 10 ms behind.
    assert.equal(clock.now(), serverAt(host.mono) - 10);
    host.mono += 30_000;
    host.wallOffset = -10 * 60_000; // the host's clock jumps back fifteen minutes
    assert.equal(clock.now(), serverAt(host.mono) - 10, 'a host jump does not move the ledger clock');
    assert.notEqual(clock.now(), host.now());
    assert.equal(clock.hostOffsetMs(), -10 * 60_000, 'the live offset shows the jump');
  });

  it('takes the best bound of its samples (the shortest round trip)', async () => {
    const host = new Host();
    const delays = [200, 4, 90];
    const clock = new LedgerClock({
      host,
      samples: 3,
      readServerTime: async () => {
        const d = delays.shift()!;
        host.mono += d;
        const t = 1_700_000_000_000 + host.mono + 7; // the server runs 7 ms ahead
        host.mono += d;
        return t;
      },
    });
    const sync = await clock.sync();
    assert.equal(sync.errorMs, 8);
    assert.equal(sync.hostOffsetMs, -7);
    assert.equal(clock.now(), host.now() + 3, 'the server runs 7 ms ahead; 4 ms of it may be the answer on the wire');
  });

  it('is never ahead of the server, wherever in the round trip the server read its clock, and rounds down', async () => {
    // A fire transaction that started before its slot (issue 25 #3) came from a clock a fraction of
    // a round trip ahead of the server: the read assumed in the middle, then rounded up.
    const serverAt = (mono: number) => 1_700_000_000_000.7 + mono; // the server's time has fractions of a ms
    for (const [request, answer] of [
      [10, 0], // read at the very end of the round trip
      [0, 10], // at its start
      [3, 3],
      [0.4, 0.1],
    ] as const) {
      const host = new Host();
      const clock = new LedgerClock({
        host,
        samples: 3,
        readServerTime: async () => {
          host.mono += request;
          const t = serverAt(host.mono);
          host.mono += answer;
          return t;
        },
      });
      const sync = await clock.sync();
      for (let step = 0; step < 50; step++) {
        host.mono += 0.37;
        const behind = serverAt(host.mono) - clock.now();
        assert.ok(behind >= 0, `${request}/${answer} ms: the clock is ${-behind} ms ahead of the server`);
        assert.ok(behind < sync.errorMs + 1, `${request}/${answer} ms: ${behind} ms behind, error ${sync.errorMs}`);
      }
    }
  });

  it('before its first sync it reads the host clock; a failed first sync is an error', async () => {
    const host = new Host();
    const clock = new LedgerClock({ host, readServerTime: async () => Promise.reject(new Error('ECONNREFUSED')) });
    assert.equal(clock.now(), host.now());
    await assert.rejects(clock.start(), /ECONNREFUSED/);
    clock.stop();
  });
});
