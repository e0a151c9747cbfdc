// Package access decides who may read stored preflight decisions and audit
// frames (docs/SECURITY.md): GET /v1/preflight/{id}, GET /v1/audit/{id} and the
// explain pages under /ui/.
//
// With a tokens file (access.tokens_file) every read needs a bearer token
// from it, and a token scoped to one tenant sees only that tenant's records;
// the HTTP API answers 404 for the rest, so a token cannot even learn that
// another tenant's id exists. A token scoped to "*" sees every tenant.
//
// Tokens are held only as SHA-256 digests. A presented token is hashed and
// compared with every configured digest in constant time (crypto/subtle), so
// neither the comparison nor the position of the matching entry leaks
// through timing, and no token is ever written to a log: log lines name the
// token entry's name at most.
//
// Without a tokens file the read endpoints answer local clients only
// (loopback naming a loopback Host and carrying no forwarding header, or a
// Unix socket listener), unless access.allow_remote_reads opens them;
// anyone else gets 403 remote-reads-forbidden. A request that says it was
// forwarded is not local, but a front on the same host that says nothing
// (a port forwarder, a proxy that adds no header and keeps or sets a
// loopback Host) cannot be told from a local client: configure tokens
// when anything else on the host accepts remote connections for the
// service.
package access
