/**
 * Where a Redis store's server is, for telemetry (`store.endpoint()`): the OpenTelemetry
 * database conventions' `server.address`, `server.port` and `db.namespace` (the database number).
 */
import type { Cluster, Redis } from 'ioredis'
import type { StoreEndpoint } from '../../core/store.js'

/**
 * The server a client talks to: the configured host and port; behind Sentinel the master it is
 * connected to now (it changes on a failover); on a Cluster only the database (the node differs
 * per key).
 */
export function redisEndpoint(client: Redis | Cluster): StoreEndpoint | undefined {
  if ((client as Cluster).isCluster === true) return { namespace: '0' }
  const redis = client as Redis
  const { options } = redis
  const namespace = String(options.db ?? 0)
  if (options.sentinels !== undefined && options.sentinels !== null && options.sentinels.length > 0) {
    const socket = redis.stream as { remoteAddress?: string; remotePort?: number } | undefined
    if (socket?.remoteAddress === undefined) return { namespace }
    return { address: socket.remoteAddress, port: socket.remotePort, namespace }
  }
  if (options.path !== undefined && options.path !== null) return { address: options.path, namespace }
  return { address: options.host ?? 'localhost', port: options.port ?? 6379, namespace }
}
