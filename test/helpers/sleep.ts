/** The tests' one pause: `await sleep(ms)` resolves after `ms` milliseconds (Node's promise timer). */
export { setTimeout as sleep } from 'node:timers/promises'
