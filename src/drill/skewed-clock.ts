/**
 * Clock skew and jumps on one replica process, for real: libfaketime (Debian's `libfaketime`)
 * preloaded into the replica shifts what the process reads as the wall clock, by an offset read
 * from a file the drill rewrites while the replica runs. The monotonic clock is left alone, as NTP
 * leaves it, so this is exactly a host whose wall clock is wrong or jumps.
 */
import { existsSync, mkdtempSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { InvalidConfigError } from '../errors.js';

/** The multi-threaded build: Node reads the clock from several threads. */
export function findLibfaketime(): string | undefined {
  // Debian puts it under the multiarch directory: /usr/lib/<triplet>/faketime/.
  const candidates = readdirSync('/usr/lib').map((d) => join('/usr/lib', d, 'faketime', 'libfaketimeMT.so.1'));
  return candidates.find((c) => existsSync(c));
}

export class SkewedClocks {
  private readonly dir = mkdtempSync(join(tmpdir(), 'cronwarden-clock-'));

  constructor(private readonly library: string) {}

  static create(): SkewedClocks {
    const library = findLibfaketime();
    if (!library)
      throw new InvalidConfigError('--faults', 'clock-skew needs libfaketime (apt-get install libfaketime)');
    return new SkewedClocks(library);
  }

  /** Environment that runs a replica process on the offset file of `slot` (initially no offset). */
  env(slot: number): NodeJS.ProcessEnv {
    const file = this.file(slot);
    if (!existsSync(file)) writeFileSync(file, '+0\n');
    return {
      LD_PRELOAD: this.library,
      FAKETIME_TIMESTAMP_FILE: file,
      FAKETIME_DONT_FAKE_MONOTONIC: '1',
      // Re-read the offset file at most once a second (reading it on every clock call is slow).
      FAKETIME_CACHE_DURATION: '1',
    };
  }

  /** Set the wall-clock offset of `slot`'s process, in seconds (negative: behind). */
  set(slot: number, offsetSeconds: number): void {
    writeFileSync(this.file(slot), `${offsetSeconds >= 0 ? '+' : ''}${Math.round(offsetSeconds)}\n`);
  }

  cleanup(): void {
    rmSync(this.dir, { recursive: true, force: true });
  }

  private file(slot: number): string {
    return join(this.dir, `slot-${slot}`);
  }
}
