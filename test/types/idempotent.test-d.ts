import { describe, expectTypeOf, it } from 'vitest'
import { type ActionContext, idempotent, memoryStore } from '../../src/index.js'

const base = { store: memoryStore(), secrets: { current: 1, keys: { 1: 'x'.repeat(32) } }, operation: 'op' }

describe('idempotent() types', () => {
  it("has fn's parameters without the context, and a promise of fn's result", () => {
    const charge = idempotent(
      async (_id: string, amount: number, { fencingToken }: ActionContext) => fencingToken + amount,
      {
        ...base,
        key: (id) => id,
      },
    )
    expectTypeOf(charge).toEqualTypeOf<(id: string, amount: number) => Promise<number>>()
    // @ts-expect-error the context is not the caller's to give
    void charge('k', 1, {} as ActionContext)
  })

  it('keeps every parameter of a function that takes no context', () => {
    const notify = idempotent((_user: { id: string }) => undefined, { ...base, key: 'id' })
    expectTypeOf(notify).toEqualTypeOf<(user: { id: string }) => Promise<undefined>>()
    const anything = idempotent(async (_message: unknown) => 1, { ...base, key: 'id' })
    expectTypeOf(anything).parameters.toEqualTypeOf<[message: unknown]>()
  })

  it('takes part of the context by destructuring', () => {
    const write = idempotent(async (_id: string, { db }: Pick<ActionContext, 'db'>) => db !== undefined, {
      ...base,
      key: (id) => id,
    })
    expectTypeOf(write).toEqualTypeOf<(id: string) => Promise<boolean>>()
  })

  it('types key, fingerprint and principal from the arguments', () => {
    idempotent(async (order: { id: string; tenant: string }) => order.id, {
      ...base,
      key: (order) => order.id,
      fingerprint: (order) => ({ id: order.id }),
      principal: (order) => order.tenant,
    })
    idempotent(async (order: { id: string }) => order.id, {
      ...base,
      // @ts-expect-error the key function gets the arguments' types
      key: (order) => order.nope,
    })
  })

  it('refuses a function with optional or rest parameters, which would get the context in their place', () => {
    // @ts-expect-error an optional parameter
    idempotent(async (_id: string, amount?: number) => amount, { ...base, key: (id: string) => id })
    // @ts-expect-error a rest parameter
    idempotent(async (...ids: string[]) => ids.length, { ...base, key: () => 'k' })
  })
})
