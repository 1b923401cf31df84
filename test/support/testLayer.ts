import { type Context, Effect, Layer } from "effect"

/** Dies whether the missing member is called as a method or yielded as an effect. */
const notImplemented = (member: string) => {
  const death = Effect.die(`${member} not implemented`)
  return Object.setPrototypeOf(Object.assign(() => death, death), Object.getPrototypeOf(death))
}

/**
 * A test double from the members a test needs. Any other member dies with
 * `"<Tag>.<member> not implemented"`, so a test that reaches a dependency it did
 * not expect fails loudly instead of passing by accident.
 */
export const makeTestLayer =
  <I, S extends object>(tag: Context.Tag<I, S>) => (implementation: Partial<S>): Layer.Layer<I> =>
    Layer.succeed(
      tag,
      new Proxy(implementation as S, {
        get: (target, member, receiver) =>
          typeof member === "symbol" || member in target
            ? Reflect.get(target, member, receiver)
            : notImplemented(`${tag.key}.${member}`)
      })
    )
