/**
 * libpq's multi-host ledger URL (issue 11): parsed as libpq reads it, refused with a clear message
 * where it cannot work, never echoing the password; a plain URL is left to node-postgres as before.
 */
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { ledgerConnection, parseLedgerUrl } from '../../src/db/ledger-url.js';
import { loadReplicaConfig } from '../../src/config/replica-config.js';
import { redactUrl } from '../../src/redact.js';

describe('ledger URL', () => {
  it('several hosts, ports defaulting to 5432, IPv6 in brackets, options kept per host', () => {
    const u = parseLedgerUrl(
      'postgresql://app:s%40cret@db1,[::1]:5433/ledger?target_session_attrs=read-write&sslmode=disable&connect_timeout=3',
    );
    assert.deepEqual(u.hosts, [
      { host: 'db1', port: 5432 },
      { host: '::1', port: 5433 },
    ]);
    assert.equal(u.targetSessionAttrs, 'read-write');
    assert.equal(u.connectTimeoutMs, 3000);
    assert.equal(u.where, 'db1:5432,[::1]:5433/ledger');
    // libpq's own options are not passed to the server as settings.
    assert.equal(u.urlFor(u.hosts[1]!), 'postgresql://app:s%40cret@[::1]:5433/ledger?sslmode=disable');
  });

  it('a plain URL goes to node-postgres as it is; several hosts or a session check get the choosing client', () => {
    for (const url of ['postgres://app@db/app', 'postgres:///app?host=/var/run/postgresql'])
      assert.deepEqual(ledgerConnection(url), { connectionString: url });
    const multi = ledgerConnection('postgres://app@db1,db2/app');
    assert.equal(multi.connectionString, 'postgres://app@db1:5432/app');
    assert.equal(typeof multi.Client, 'function');
    assert.equal(typeof ledgerConnection('postgres://app@db1/app?target_session_attrs=primary').Client, 'function');
  });

  it('refuses what cannot work, saying why', () => {
    const cases: [string, RegExp][] = [
      ['postgres://h1,,h2/db', /host 2 \(""\) must be host\[:port\]/],
      ['postgres://h1:0,h2/db', /host 1: port 0 is not 1-65535/],
      ['postgres://h1,h2/db?target_session_attrs=standby', /the ledger is written to; use read-write/],
      ['postgres://h1,h2/db?target_session_attrs=rw', /must be one of any, read-write, primary/],
      ['postgres://h1,h2/db?host=h3', /give no host, port or hostaddr option/],
      ['postgres://h1,h2/db?connect_timeout=0', /connect_timeout=0: must be a whole number of seconds/],
      ['mysql://h1,h2/db', /expected postgres:\/\//],
    ];
    for (const [url, message] of cases) assert.throws(() => parseLedgerUrl(url), message, url);
  });

  it('the setting takes a multi-host URL, refuses a bad one in one line, and never shows its password', () => {
    const env = { CRONWARDEN_REDIS_URL: 'redis://127.0.0.1:6379', CRONWARDEN_JOBS: 'jobs.js' };
    const good = 'postgres://app:hunter2secret@db1:5432,db2:5432/app?target_session_attrs=read-write';
    const config = loadReplicaConfig({ backend: 'postgres' }, { ...env, CRONWARDEN_DATABASE_URL: good });
    assert.equal(config.databaseUrl, good);
    assert.deepEqual(config.backend, { kind: 'postgres', url: good });
    assert.equal(redactUrl(good), 'postgres://app:*****@db1:5432,db2:5432/app?target_session_attrs=read-write');
    assert.throws(
      () =>
        loadReplicaConfig(
          { backend: 'postgres' },
          { ...env, CRONWARDEN_DATABASE_URL: 'postgres://app:hunter2secret@db1,db2:99999/app' },
        ),
      (err: Error) =>
        err.message === 'CRONWARDEN_DATABASE_URL (--database-url): host 2: port 99999 is not 1-65535' &&
        !err.message.includes('hunter2'),
    );
  });
});
