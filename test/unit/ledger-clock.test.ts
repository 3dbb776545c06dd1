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
    assert.equal(sync.errorMs, 10);
    assert.equal(sync.hostOffsetMs, 5 * 60_000);
    assert.equal(clock.now(), serverAt(host.mono));
    host.mono += 30_000;
    host.wallOffset = -10 * 60_000; // the host's clock jumps back fifteen minutes
    assert.equal(clock.now(), serverAt(host.mono), 'a host jump does not move the ledger clock');
    assert.notEqual(clock.now(), host.now());
    assert.equal(clock.hostOffsetMs(), -10 * 60_000, 'the live offset shows the jump');
  });

  it('takes the sample with the shortest round trip', async () => {
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
    assert.equal(sync.errorMs, 4);
    assert.equal(sync.hostOffsetMs, -7);
    assert.equal(clock.now(), host.now() + 7);
  });

  it('before its first sync it reads the host clock; a failed first sync is an error', async () => {
    const host = new Host();
    const clock = new LedgerClock({ host, readServerTime: async () => Promise.reject(new Error('ECONNREFUSED')) });
    assert.equal(clock.now(), host.now());
    await assert.rejects(clock.start(), /ECONNREFUSED/);
    clock.stop();
  });
});
