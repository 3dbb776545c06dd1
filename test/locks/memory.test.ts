import { leaseConformance } from './conformance.js';
import { MemoryLeaseBackend, MemoryLeaseStore } from '../../src/locks/memory.js';

const store = new MemoryLeaseStore();
leaseConformance('memory', { connect: async () => new MemoryLeaseBackend({ store }) });
