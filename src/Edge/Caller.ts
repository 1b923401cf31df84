import { BlockList, isIP } from "node:net"
import type { Cidr } from "../Config.ts"

/**
 * Who sent a request, as the log tells it (README, Operating it: Logs): the client's address, the
 * request's id (echoed in `X-Request-Id`), and the id the caller gave its request when that one is
 * not believed.
 */
export interface Caller {
  readonly clientAddress: string
  readonly requestId: string
  readonly clientRequestId: string | null
}

/** A request id from a trusted proxy is kept when it is sane: short, printable, no spaces. */
const saneRequestId = /^[A-Za-z0-9._:@+=/-]{1,128}$/

/** At most this many characters of a caller's own request id are logged. */
const clientRequestIdLength = 128

/** A caller's own request id as the log keeps it: its first characters, anything unprintable as `?`. */
const bounded = (id: string): string => id.slice(0, clientRequestIdLength).replace(/[^\x20-\x7e]/g, "?")

/** An address as a forwarding header writes it, without brackets or port; undefined when it is none. */
const addressOf = (node: string): string | undefined => {
  let text = node.trim()
  if (text.startsWith("\"") && text.endsWith("\"") && text.length > 1) text = text.slice(1, -1)
  if (text.startsWith("[")) text = text.slice(1, text.indexOf("]") === -1 ? undefined : text.indexOf("]"))
  else if (isIP(text) === 0 && /^[\d.]+:\d+$/.test(text)) text = text.slice(0, text.lastIndexOf(":"))
  return isIP(text) === 0 ? undefined : text
}

/** The `for=` nodes of a `Forwarded` header (RFC 7239), in order. */
const forwardedFor = (header: string): Array<string> =>
  header.split(",").flatMap((element) =>
    element.split(";").flatMap((pair) => {
      const at = pair.indexOf("=")
      return at !== -1 && pair.slice(0, at).trim().toLowerCase() === "for" ? [pair.slice(at + 1)] : []
    })
  )

/**
 * How the edge tells who sent a request, from the socket's peer and `TRUSTED_PROXIES`. A peer that
 * is not a trusted proxy is the client, and its `X-Request-Id` is logged as `clientRequestId` beside
 * an id of the server's own, so that no caller can make its requests collide with another's in
 * the log. A trusted proxy's `X-Request-Id` is the request's id; its client is the last address
 * of `X-Forwarded-For` (or, without one, of `Forwarded`) that is not a trusted proxy itself:
 * what a client wrote there before the proxies appended theirs is never believed.
 */
export const makeCallers = (trustedProxies: ReadonlyArray<Cidr>) => {
  const trusted = new BlockList()
  for (const { address, family, prefix } of trustedProxies) trusted.addSubnet(address, prefix, family)
  const isTrusted = (address: string): boolean => {
    const version = isIP(address)
    return version !== 0 && trusted.check(address, version === 4 ? "ipv4" : "ipv6")
  }

  const forwardedClient = (request: Request, peer: string): string => {
    const xForwardedFor = request.headers.get("x-forwarded-for")
    const forwarded = xForwardedFor === null ? request.headers.get("forwarded") : null
    const hops = xForwardedFor !== null ? xForwardedFor.split(",") : forwarded !== null ? forwardedFor(forwarded) : []
    let client = peer
    for (let i = hops.length - 1; i >= 0; i--) {
      const address = addressOf(hops[i]!)
      // Unreadable: whoever wrote it is not known, and the last proxy that was is named instead.
      if (address === undefined) break
      client = address
      if (!isTrusted(address)) break
    }
    return client
  }

  const noProxies = trustedProxies.length === 0
  return (request: Request, peer: string): Caller => {
    const sent = request.headers.get("x-request-id")
    if (noProxies || !isTrusted(peer)) {
      return {
        clientAddress: peer,
        requestId: crypto.randomUUID(),
        clientRequestId: sent === null ? null : bounded(sent)
      }
    }
    return {
      clientAddress: forwardedClient(request, peer),
      requestId: sent !== null && saneRequestId.test(sent) ? sent : crypto.randomUUID(),
      clientRequestId: null
    }
  }
}
