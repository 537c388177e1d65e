/**
 * The Redis store's key watch for waiters: a subscriber connection of its own (a duplicate of the
 * client, made on first use), SSUBSCRIBE per watched key, and the listeners told when the scripts
 * that end an execution SPUBLISH on the key's channel.
 */
import type { Cluster, Redis } from 'ioredis'
import { checkKey } from '../../core/store-args.js'
import { KeyListeners } from '../key-listeners.js'

/** The watched keys of one store and the connection they are subscribed on. */
export class KeyWatch {
  readonly #redis: Redis | Cluster
  /** The connection `watch()` subscribes on, made on first use; its listeners by channel. */
  #subscriber: Redis | Cluster | undefined
  readonly #listeners = new KeyListeners()
  /** Channel → its SSUBSCRIBE, settled once the subscription is active (or failed). */
  readonly #subscribed = new Map<string, Promise<void>>()
  #closed = false

  constructor(redis: Redis | Cluster) {
    this.#redis = redis
  }

  /**
   * Calls `listener` when the record under `key` completes, fails, is released or replaced, on
   * any instance: the scripts that end an execution SPUBLISH on the channel named like the key,
   * and this store SSUBSCRIBEs to it on a connection of its own (a duplicate of the client, made
   * on first use; on a Cluster with `shardedSubscribers`, one per master). Redis pub/sub is at
   * most once: a message sent while that connection reconnects is lost, and the waiters' poll
   * covers it.
   */
  watch(key: string, listener: () => void, ready?: () => void): () => void {
    checkKey(key)
    const subscriber = this.#subscriberConnection()
    // The channel as Redis names it in its messages: with the client's own key prefix.
    const channel = `${this.#redis.options.keyPrefix ?? ''}${key}`
    const stop = this.#listeners.add(
      channel,
      listener,
      // SSUBSCRIBE is answered once the subscription is active: `ready` follows that answer
      // (or its failure: then the poll alone decides).
      () => this.#subscribed.set(channel, subscriber.ssubscribe(key).then(ignore, ignore)),
      () => {
        this.#subscribed.delete(channel)
        if (!this.#closed) subscriber.sunsubscribe(key).catch(ignore)
      },
    )
    if (ready !== undefined) void (this.#subscribed.get(channel) ?? Promise.resolve()).then(ready)
    return stop
  }

  /** The store closed: the listeners dropped and the subscriber connection closed. */
  close(): void {
    this.#closed = true
    this.#listeners.clear()
    this.#subscriber?.disconnect()
  }

  #subscriberConnection(): Redis | Cluster {
    if (this.#subscriber !== undefined) return this.#subscriber
    const client = this.#redis
    // Subscriptions wait in the offline queue until the connection is up, and ioredis
    // subscribes again after every reconnection.
    const subscriber = client.isCluster
      ? (client as Cluster).duplicate(undefined, { shardedSubscribers: true, enableOfflineQueue: true })
      : (client as Redis).duplicate({ enableOfflineQueue: true, lazyConnect: false })
    subscriber.on('error', ignore)
    subscriber.on('smessage', (channel: string) => this.#listeners.notify(channel))
    this.#subscriber = subscriber
    return subscriber
  }
}

function ignore(): void {}
