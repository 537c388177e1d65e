// Makes sure the server binaries the tests start are here (`npm test` runs this first, as its
// `pretest`; .ci/run too): redis-server and PostgreSQL's initdb and postgres, which the suite
// needs, and redis-cli, redis-sentinel and cc (the fault suite's, the Sentinel tests' and the
// clock-step test's). The tests
// start their own servers on free 127.0.0.1 ports: nothing here starts one.
//
// What is missing is installed where that is possible: as root on Debian or Ubuntu, with
// apt-get, keeping the packages from creating a PostgreSQL cluster (create_main_cluster = false)
// or starting a service (a policy-rc.d that refuses, for the install only). Otherwise, when the
// suite cannot run, it stops at once with the command to run; a missing optional one is named
// in one line and the tests go on.
//
//   node scripts/test-servers.mjs
import { spawnSync } from 'node:child_process'
import { chmodSync, existsSync, mkdirSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs'
import { delimiter, join } from 'node:path'

/** Whether `name` is an executable on PATH. */
function onPath(name) {
  return (process.env.PATH ?? '').split(delimiter).some((dir) => dir !== '' && existsSync(join(dir, name)))
}

/** Whether PostgreSQL's server binaries are here: Debian's versioned directory, or initdb on PATH. */
function postgresServer() {
  const debian = '/usr/lib/postgresql'
  if (existsSync(debian)) {
    for (const version of readdirSync(debian)) {
      if (existsSync(join(debian, version, 'bin', 'initdb')) && existsSync(join(debian, version, 'bin', 'postgres'))) {
        return true
      }
    }
  }
  return onPath('initdb') && onPath('postgres')
}

/** Each binary: whether the suite needs it, how to find it, its Debian package. */
const BINARIES = [
  { name: 'redis-server', needed: true, found: () => onPath('redis-server'), apt: 'redis-server' },
  { name: 'PostgreSQL (initdb, postgres)', needed: true, found: postgresServer, apt: 'postgresql' },
  { name: 'redis-cli', needed: false, found: () => onPath('redis-cli'), apt: 'redis-tools', for: 'the fault suite' },
  {
    name: 'redis-sentinel',
    needed: false,
    found: () => onPath('redis-sentinel'),
    apt: 'redis-sentinel',
    for: 'the Sentinel tests, which otherwise run redis-server --sentinel',
  },
  {
    name: 'cc',
    needed: false,
    found: () => onPath('cc'),
    apt: 'gcc',
    for: "the Redis clock-step test, which builds a shim that steps redis-server's clock",
  },
]

const missing = () => BINARIES.filter((binary) => !binary.found())

/** Root with apt-get: the one case this script installs packages itself. */
function canInstall() {
  return typeof process.getuid === 'function' && process.getuid() === 0 && onPath('apt-get')
}

/** Debian's PostgreSQL packages create and start a cluster on 5432 unless told not to. */
function noMainCluster() {
  const file = '/etc/postgresql-common/createcluster.conf'
  mkdirSync('/etc/postgresql-common', { recursive: true })
  const text = existsSync(file) ? readFileSync(file, 'utf8') : ''
  if (/^\s*create_main_cluster\s*=\s*false/m.test(text)) return
  const kept = text.replace(/^\s*create_main_cluster.*$/gm, '').trimEnd()
  writeFileSync(file, `${kept === '' ? '' : `${kept}\n`}create_main_cluster = false\n`)
}

/** apt-get install of `packages` with services kept from starting (policy-rc.d: 101, "action forbidden"). */
function install(packages) {
  console.log(`test servers: installing ${packages.join(' ')} (apt-get; no service is started)`)
  if (packages.includes('postgresql')) noMainCluster()
  const policy = '/usr/sbin/policy-rc.d'
  const ownPolicy = !existsSync(policy)
  if (ownPolicy) {
    writeFileSync(policy, '#!/bin/sh\nexit 101\n')
    chmodSync(policy, 0o755)
  }
  try {
    const env = { ...process.env, DEBIAN_FRONTEND: 'noninteractive' }
    for (const args of [['update'], ['install', '-y', '--no-install-recommends', ...packages]]) {
      const result = spawnSync('apt-get', args, { stdio: 'inherit', env })
      if (result.status !== 0) return false
    }
    return true
  } finally {
    if (ownPolicy) rmSync(policy, { force: true })
  }
}

function command(packages) {
  return `${onPath('apt-get') ? 'sudo apt-get install -y' : 'apt-get install -y'} ${packages.join(' ')}`
}

let absent = missing()
if (absent.length > 0 && canInstall()) {
  install(absent.map((binary) => binary.apt))
  absent = missing()
}
const needed = absent.filter((binary) => binary.needed)
if (needed.length > 0) {
  const packages = absent.map((binary) => binary.apt)
  console.error(
    `npm test needs ${needed.map((binary) => binary.name).join(' and ')}: the tests start their own on free ` +
      '127.0.0.1 ports and never touch a server you run.\n' +
      (onPath('apt-get')
        ? `Install ${packages.length > 1 ? 'them' : 'it'}, then run npm test again:\n\n  ${command(packages)}\n`
        : `On Debian or Ubuntu: ${command(packages)}. Elsewhere install Redis 7 or later and PostgreSQL 15's ` +
          'server (initdb and postgres on PATH) from your package manager, then run npm test again.\n'),
  )
  process.exit(1)
}
for (const binary of absent) {
  console.log(`test servers: ${binary.name} is not installed (${binary.for}): ${command([binary.apt])}`)
}
