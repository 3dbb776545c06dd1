/**
 * The drill's TCP proxy against a real echo server on loopback: bytes pass unchanged and in
 * order, a partition holds them (and new connections) until heal, delay and loss slow every chunk
 * without reordering, and a backend that goes away takes the client's connection with it.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { connect, createServer, type Server, type Socket } from 'node:net';
import { once } from 'node:events';
import { TcpProxy } from '../../src/drill/tcp-proxy.js';
import { seededRandom } from '../../src/drill/faults.js';

let echo: Server;
let echoPort: number;
const upstreamSockets = new Set<Socket>();

before(async () => {
  echo = createServer((s) => {
    upstreamSockets.add(s);
    s.on('close', () => upstreamSockets.delete(s));
    s.on('error', () => {});
    s.pipe(s);
  });
  await new Promise<void>((r) => echo.listen(0, '127.0.0.1', r));
  echoPort = (echo.address() as { port: number }).port;
});
after(() => new Promise<void>((r) => echo.close(() => r())));

async function client(
  port: number,
): Promise<{ socket: Socket; received: () => string; waitFor: (text: string, ms: number) => Promise<boolean> }> {
  const socket = connect({ host: '127.0.0.1', port });
  await once(socket, 'connect');
  let data = '';
  socket.on('data', (d: Buffer) => (data += d.toString()));
  return {
    socket,
    received: () => data,
    waitFor: async (text, ms) => {
      const deadline = Date.now() + ms;
      while (!data.includes(text)) {
        if (Date.now() > deadline) return false;
        await new Promise((r) => setTimeout(r, 5));
      }
      return true;
    },
  };
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

describe('TcpProxy', () => {
  it('forwards bytes both ways unchanged', async () => {
    const proxy = await TcpProxy.start({ host: '127.0.0.1', port: echoPort });
    const c = await client(proxy.port);
    const payload = Buffer.alloc(256 * 1024, 'abcdefgh').toString();
    c.socket.write(payload);
    assert.ok(await c.waitFor(payload, 5000));
    assert.equal(c.received(), payload);
    c.socket.destroy();
    await proxy.close();
  });

  it('a partition holds bytes both ways and delays new connections; heal delivers them in order', async () => {
    const proxy = await TcpProxy.start({ host: '127.0.0.1', port: echoPort });
    const c = await client(proxy.port);
    c.socket.write('before;');
    assert.ok(await c.waitFor('before;', 2000));
    proxy.partition();
    c.socket.write('one;');
    c.socket.write('two;');
    const upstreamBefore = upstreamSockets.size;
    const late = await client(proxy.port); // accepted by the proxy, but reaches nothing
    late.socket.write('late;');
    await sleep(300);
    assert.equal(c.received(), 'before;', 'nothing crosses a partition');
    assert.equal(late.received(), '');
    assert.equal(upstreamSockets.size, upstreamBefore, 'no upstream connection during the partition');
    assert.ok(proxy.stats.held >= 2);
    proxy.heal();
    assert.ok(await c.waitFor('two;', 2000));
    assert.equal(c.received(), 'before;one;two;');
    assert.ok(await late.waitFor('late;', 2000));
    assert.equal(proxy.stats.held, 0);
    c.socket.destroy();
    late.socket.destroy();
    await proxy.close();
  });

  it('a partition that strikes while chunks are delayed holds them ahead of later ones', async () => {
    const proxy = await TcpProxy.start({ host: '127.0.0.1', port: echoPort });
    const c = await client(proxy.port);
    proxy.degrade({ delayMs: 100 });
    c.socket.write('first;');
    await sleep(20);
    proxy.partition();
    c.socket.write('second;');
    await sleep(250);
    assert.equal(c.received(), '');
    proxy.heal();
    assert.ok(await c.waitFor('second;', 2000));
    assert.equal(c.received(), 'first;second;');
    c.socket.destroy();
    await proxy.close();
  });

  it('delay with jitter slows every chunk, both ways, and never reorders', async () => {
    const proxy = await TcpProxy.start({ host: '127.0.0.1', port: echoPort }, seededRandom(7));
    const c = await client(proxy.port);
    proxy.degrade({ delayMs: 75, jitterMs: 50 });
    // One round trip crosses the proxy twice: at least 2 x (75 - 50) ms.
    const t0 = performance.now();
    c.socket.write('ping;');
    assert.ok(await c.waitFor('ping;', 2000));
    assert.ok(performance.now() - t0 >= 49, `round trip took ${performance.now() - t0} ms`);
    // Many small writes in quick succession, each with its own jittered delay, arrive in order.
    let sent = '';
    for (let i = 0; i < 100; i++) {
      const part = `${i},`;
      sent += part;
      c.socket.write(part);
      if (i % 10 === 0) await sleep(3);
    }
    assert.ok(await c.waitFor('99,', 5000));
    assert.equal(c.received(), `ping;${sent}`);
    proxy.heal();
    const t1 = performance.now();
    c.socket.write('fast;');
    assert.ok(await c.waitFor('fast;', 2000));
    assert.ok(performance.now() - t1 < 49, 'heal removes the delay');
    c.socket.destroy();
    await proxy.close();
  });

  it('loss costs a retransmission timeout per lost chunk, and still delivers everything in order', async () => {
    const proxy = await TcpProxy.start({ host: '127.0.0.1', port: echoPort }, seededRandom(11));
    const c = await client(proxy.port);
    proxy.degrade({ lossRate: 0.3, retransmitMs: 20 });
    let sent = '';
    for (let i = 0; i < 60; i++) {
      sent += `${i};`;
      c.socket.write(`${i};`);
      await sleep(2);
    }
    assert.ok(await c.waitFor('59;', 10_000));
    assert.equal(c.received(), sent);
    assert.ok(proxy.stats.lost > 5, `lost ${proxy.stats.lost} of ${proxy.stats.chunks}`);
    assert.ok(proxy.stats.lost < proxy.stats.chunks);
    c.socket.destroy();
    await proxy.close();
  });

  it('a backend that goes away closes the client connection', async () => {
    const target = createServer((s) => {
      s.on('error', () => {});
      setTimeout(() => s.destroy(), 50);
    });
    await new Promise<void>((r) => target.listen(0, '127.0.0.1', r));
    const proxy = await TcpProxy.start({ host: '127.0.0.1', port: (target.address() as { port: number }).port });
    const c = await client(proxy.port);
    c.socket.on('error', () => {});
    await Promise.race([once(c.socket, 'close'), sleep(3000).then(() => assert.fail('client connection stayed open'))]);
    await proxy.close();
    await new Promise<void>((r) => target.close(() => r()));
  });
});
