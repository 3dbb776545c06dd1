import { createServer } from 'node:net';
import { DrillError } from '../../errors.js';

/** Ask the kernel for a free loopback port. */
export function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const srv = createServer();
    srv.unref();
    srv.on('error', reject);
    srv.listen(0, '127.0.0.1', () => {
      const address = srv.address();
      srv.close(() =>
        typeof address === 'object' && address
          ? resolve(address.port)
          : reject(new DrillError('the kernel gave no loopback port')),
      );
    });
  });
}
