import { BlockList, isIP } from "node:net"
import type { Cidr, ProxyHeader } from "../Config.ts"

/**
 * Who sent a request, as the log tells it (docs/operators.md, Operating it: Logs): the client's address, the
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

/**
 * The longest an address is written (an IPv6 address ending in an IPv4 one). `isIP` takes an IPv6
 * zone id of any length (`fe80::1%` and thousands of characters), which a client could otherwise
 * have logged, and kept in the 401 tally, as its address.
 */
const longestAddress = "ffff:ffff:ffff:ffff:ffff:ffff:255.255.255.255".length

/**
 * An address as a forwarding header writes it, without brackets or port; undefined when it is
 * none, has a zone id or is longer than an address is.
 */
const addressOf = (node: string): string | undefined => {
  let text = node.trim()
  if (text.startsWith("\"") && text.endsWith("\"") && text.length > 1) text = text.slice(1, -1)
  if (text.startsWith("[")) text = text.slice(1, text.indexOf("]") === -1 ? undefined : text.indexOf("]"))
  else if (isIP(text) === 0 && /^[\d.]+:\d+$/.test(text)) text = text.slice(0, text.lastIndexOf(":"))
  return text.length > longestAddress || text.includes("%") || isIP(text) === 0 ? undefined : text
}

/** The `for=` nodes of a `Forwarded` header (RFC 7239), in order. */
const forwardedFor = (header: string): Array<string> =>
  header.split(",").flatMap((element) =>
    element.split(";").flatMap((pair) => {
      const at = pair.indexOf("=")
      return at !== -1 && pair.slice(0, at).trim().toLowerCase() === "for" ? [pair.slice(at + 1)] : []
    })
  )

/** An IPv6 address's eight groups, as numbers; undefined when it is none (or has a zone id). */
const ipv6Groups = (address: string): Array<number> | undefined => {
  if (isIP(address) !== 6) return undefined
  const [head = "", tail] = address.split("::")
  const groupsOf = (part: string): Array<number> =>
    part === "" ? [] : part.split(":").flatMap((group) => {
      if (!group.includes(".")) return [parseInt(group, 16)]
      const [a = 0, b = 0, c = 0, d = 0] = group.split(".").map(Number)
      return [(a << 8) | b, (c << 8) | d]
    })
  const start = groupsOf(head)
  const end = tail === undefined ? [] : groupsOf(tail)
  return [...start, ...Array<number>(8 - start.length - end.length).fill(0), ...end]
}

/** An IPv4-mapped IPv6 address (`::ffff:192.0.2.1`, as a dual-stack listener sees IPv4 clients) as its IPv4 address. */
const unmapped = (address: string): string => {
  if (!address.includes(":") || !address.toLowerCase().includes("ffff")) return address
  const groups = ipv6Groups(address)
  if (groups === undefined || groups.slice(0, 5).some((group) => group !== 0) || groups[5] !== 0xffff) return address
  return `${groups[6]! >> 8}.${groups[6]! & 0xff}.${groups[7]! >> 8}.${groups[7]! & 0xff}`
}

/**
 * The client an address stands for wherever clients are counted (connections per address, the 401
 * tally; docs/operators.md, Operating it: Connections): an IPv4 address as it is, an IPv4-mapped one as its
 * IPv4 address, and an IPv6 address by its /64, the least a network hands one subscriber, so that a
 * client does not get a budget per address of its prefix.
 */
export const clientKeyOf = (address: string): string => {
  if (!address.includes(":")) return address
  const plain = unmapped(address)
  if (plain !== address) return plain
  const groups = ipv6Groups(address)
  return groups === undefined ? address : `${written([...groups.slice(0, 4), 0, 0, 0, 0])}/64`
}

/** Eight groups as RFC 5952 writes them: lowercase, the longest run of two or more zero groups as `::`. */
const written = (groups: ReadonlyArray<number>): string => {
  let run = { start: -1, length: 1 }
  for (let start = 0; start < groups.length; start++) {
    let length = 0
    while (groups[start + length] === 0) length++
    if (length > run.length) run = { start, length }
  }
  const hex = (part: ReadonlyArray<number>) => part.map((group) => group.toString(16)).join(":")
  return run.start === -1
    ? hex(groups)
    : `${hex(groups.slice(0, run.start))}::${hex(groups.slice(run.start + run.length))}`
}

/** Whether an address is in one of `proxies` (`TRUSTED_PROXIES`): never, without any. */
export const trustedBy = (proxies: ReadonlyArray<Cidr>): (address: string) => boolean => {
  if (proxies.length === 0) return () => false
  const trusted = new BlockList()
  for (const { address, family, prefix } of proxies) trusted.addSubnet(address, prefix, family)
  return (given) => {
    const address = unmapped(given)
    const version = isIP(address)
    return version !== 0 && trusted.check(address, version === 4 ? "ipv4" : "ipv6")
  }
}

/**
 * How the edge tells who sent a request, from the socket's peer, `TRUSTED_PROXIES` and
 * `TRUSTED_PROXY_HEADER` (docs/operators.md, Deployment: Behind a reverse proxy). A peer that is not a trusted
 * proxy is the client, and its `X-Request-Id` is logged as `clientRequestId` beside an id of the
 * server's own, so that no caller can make its requests collide with another's in the log. A
 * trusted proxy's `X-Request-Id` is the request's id; its client is the last address of `header`
 * that is not a trusted proxy itself: what a client wrote there before the proxies appended theirs
 * is never believed, nor is the other forwarding header, which only a client can have written.
 */
export const makeCallers = (trustedProxies: ReadonlyArray<Cidr>, header: ProxyHeader) => {
  const isTrusted = trustedBy(trustedProxies)

  const hopsOf = header === "forwarded" ? forwardedFor : (written: string) => written.split(",")
  const forwardedClient = (request: Request, peer: string): string => {
    const written = request.headers.get(header)
    const hops = written === null ? [] : hopsOf(written)
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
