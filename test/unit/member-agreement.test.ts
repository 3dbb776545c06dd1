import { it } from 'node:test';
import assert from 'node:assert/strict';
import { memberAgreement } from '../../src/admin/member-agreement.js';

it('members running the same jobs agree; a rolling deploy shows the versions and who lacks which job', () => {
  assert.deepEqual(
    memberAgreement([
      { replicaId: 'r1', version: '0.2.0', jobs: ['a', 'b'] },
      { replicaId: 'r2', version: '0.2.0', jobs: ['b', 'a'] },
    ]),
    { versions: ['0.2.0'], jobsAgree: true, missing: {} },
  );
  assert.deepEqual(
    memberAgreement([
      { replicaId: 'old', version: '0.1.0', jobs: ['a', 'removed'] },
      { replicaId: 'new', version: '0.2.0', jobs: ['a', 'added'] },
      { replicaId: 'ancient', version: '0.0.9', jobs: null },
    ]),
    { versions: ['0.0.9', '0.1.0', '0.2.0'], jobsAgree: false, missing: { old: ['added'], new: ['removed'] } },
  );
});
