/** Misspelt CRONWARDEN_ variables are named with the setting they look like (issue 25, item 11). */
import { it } from 'node:test';
import assert from 'node:assert/strict';
import { envTypos } from '../../src/config/env-typos.js';

it("names a variable a few letters from a setting's, with that one; leaves known and unrelated names alone", () => {
  assert.deepEqual(
    envTypos({
      CRONWARDEN_LEASE_TTL: '5000', // _MS left out
      CRONWARDEN_ADMIN_TOKN: 'x',
      cronwarden_redis_url: 'redis://x', // the right name in the wrong case
      CRONWARDEN_LEASE_TTL_MS: '5000',
      CRONWARDEN_ADMIN_URL: 'http://x',
      CRONWARDEN_TEST_REDIS_URL: 'redis://x', // the tests' own
      CRONWARDEN_DEMO_ADMIN_URL: 'http://x', // the demo's own
      PATH: '/usr/bin',
    }),
    [
      { name: 'CRONWARDEN_ADMIN_TOKN', nearest: 'CRONWARDEN_ADMIN_TOKEN' },
      { name: 'CRONWARDEN_LEASE_TTL', nearest: 'CRONWARDEN_LEASE_TTL_MS' },
      { name: 'cronwarden_redis_url', nearest: 'CRONWARDEN_REDIS_URL' },
    ],
  );
});
