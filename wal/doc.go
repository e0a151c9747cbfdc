// Package wal is ContractRefine's durable, tamper-evident decision log: the
// write-ahead log every preflight verdict, tool decision and consumed marker
// is committed to before the answer that depends on it is sent.
//
// # On-disk format
//
// The log is one bbolt file (<data-dir>/wal.db) with these buckets:
//
//	frames       key: seq as 8-byte big-endian       value: the frame as JSON, or packed (below)
//	audit        key: audit_id 0x00 seq (8-byte BE)  value: empty (frames by audit id)
//	             and the consumed markers: key audit_id 0x01 preflight_id 0x00 step (2-byte BE index
//	             into the plan), value JSON {"request_id","seq","at","args_digest"} of the
//	             autonomy.preflight_consumed frame (args_digest: the consuming call's, absent when
//	             the consume named none); markers.go. Versions 1 and 2 keep them in a "consumed"
//	             bucket instead, key preflight_id 0x00 step
//	preflights   key: preflight_id                   value: seq of its autonomy.preflight frame (8-byte BE),
//	             then the compact binding record (below)
//	sessions     key: session key, the JSON array ["<actor id>","<session_id>","<plan_hash>"]
//	             (compaction reads it from the frame's session_key)
//	             value: attempts so far, 4-byte BE, then the attempt of the session's first
//	             repair_required, 4-byte BE (0: none yet)
//	idempotency  key: scope 0x00 idempotency key     value: JSON {"request_digest","preflight_id"}
//	meta         key: "head"  value: JSON {"seq","hash"} of the newest frame
//	             key: "base"  value: JSON {"seq","hash"} of the newest frame removed by compaction
//	             key: "version"  value: the format version in decimal, "3" (FormatVersion); Open
//	             reads "1" and "2" too (and, writable, makes it "3", moving the markers), takes a
//	             log without the key for version 1 (written before the key existed), and refuses
//	             any other (ErrVersionMismatch), or a log whose consumed bucket says another
//	             version (ErrCorrupt)
//	retired      key: session key                    value: how many of the session's preflight
//	             frames compaction removed, 4-byte BE (created by the first compaction that needs it)
//	approvals    key: preflight_id 0x00 step_id      value: JSON of an Approval: the step's kind, args digest,
//	             authorities, expiry, tenant and actor, its state (pending, approved, rejected) and,
//	             once decided, the decision and the seq of its autonomy.approval frame (created by the
//	             first preflight with a step that waits for an approval; removed with the binding)
//
// Preflight and audit ids begin with their creation time in characters that
// sort as the time does (internal/ids), so the audit and preflights
// indexes grow at their end like the frames bucket; the commit
// fills their pages to 90 % (frames: 100 %) instead of bbolt's 50 %.
//
// A frame is {"seq","kind","timestamp","audit_id","attrs","prev_hash","hash"}.
// seq starts at 1 and grows by one with every frame. timestamp is RFC 3339
// with nanoseconds, UTC. attrs is canonical JSON (package internal/canon).
// The stored JSON is what encoding/json writes with HTML escaping off, attrs
// byte for byte.
//
// The attrs of each kind have one type (frameattrs.go, outcome.go), which
// the writers fill and the readers decode:
//
//	autonomy.preflight           PreflightAttrs (with SubmitAttrs for a preflight of the API)
//	autonomy.decision            DecisionAttrs
//	autonomy.preflight_consumed  ConsumedAttrs
//	autonomy.approval            ApprovalAttrs
//	autonomy.outcome             OutcomeAttrs
//
// A log opened with Options.Replica adds "replica" to the attrs of every
// frame it writes that names none.
//
// A frame whose attrs are 1 KiB or more (the autonomy.preflight frames,
// which carry the whole decision) is stored packed when packing shrinks its
// attrs by at least a quarter:
//
//	0x02  uvarint(n)  n bytes: the attrs, an S2 block against dictionary 1  {the frame's JSON without "attrs"}
//
// S2 is github.com/klauspost/compress/s2's block format; dictionary 1 is
// the bytes of packdict1.txt with its repeat offset at 0 (pack.go). Logs of
// format version 1 hold frames packed with DEFLATE (RFC 1951) instead, which
// this version reads:
//
//	0x01  uvarint(n)  n bytes: the attrs, DEFLATE-compressed  {the frame's JSON without "attrs"}
//
// and frame copies shared between replicas (etcd) keep that form, so that
// replicas of either version read each other's during an upgrade
// (EncodeFrame, SharedForm). A shared copy may hold several frames (the
// frames of one commit that follow each other under one audit id), each
// in one of those forms:
//
//	0x03  then for each frame: uvarint(n)  n bytes: the frame
//
// (EncodeFrameList, DecodeFrameList; never a stored frame). A binary
// built before lists were written reads one frame a copy and refuses a
// list (docs/OPERATIONS.md, "Retention and WAL tools"). A stored JSON
// frame starts with '{', so the first byte tells the forms apart. Packing
// is storage only: the hash covers the canonical attrs either way,
// DecodeFrame returns the same Frame, and Export writes JSON. It keeps a
// one-step preflight well under the 2 KB a frame may take on disk (the
// decision JSON alone is about 1.5 KB; docs/PERFORMANCE.md has the
// figures).
//
// # Binding record
//
// The gate looks a binding up on every binding-cache miss. Reading it from
// the frame meant inflating and decoding the whole packed decision and paging
// in the frame's pages of the file (most of the service's RSS with 100,000
// bindings cached; docs/PERFORMANCE.md). So the preflights value carries, after
// the frame's seq, what the gate needs:
//
//	0x01 (version)  str(audit_id)  str(outcome)  str(actor_id)  str(tenant, "" for none)
//	varint(expires_at, seconds since 1970 UTC)  uvarint(expires_at's nanoseconds)
//	uvarint(step count), then per step:  str(id)  str(kind)  digest
//	then, only when a step waits for an approval:  0x01, and per step 0x00 (none) or
//	0x01  uvarint(n)  n × str(authority)  varint(expiry seconds)  uvarint(expiry nanoseconds)
//
// str(s) is uvarint(len(s)) and the bytes of s; varint and uvarint are those
// of encoding/binary. digest is 0x01 and 32 bytes for "sha256:" followed by
// 64 lowercase hex digits (the form every args digest has), else 0x00 and
// str(the digest). The record repeats what the frame states, so it is not
// part of the hash chain: the frame stays the record of proof, and the
// record is an index written in the frame's transaction. Verify, once the
// chain holds, compares every record with the frame it names (ids, outcome,
// actor, tenant, expiry, steps) and reports the frame's seq when they
// differ, so an edited record cannot pass for a verified log.
// DB.Binding returns the binding from the record once it has compared it
// with the frame, and the frame with the chain around it (trust.go): an
// edit made while the service runs fails that read and the log is trusted
// no more. With Options.VerifyOnOpen nothing is decided from a log until
// Verify has passed on it. DB.Decision reads the decision from the frame.
// Every preflights value carries the record: a value of any other form is
// a corrupt record, for Binding and for Verify.
//
// # Hash chain
//
// The canonical bytes of a frame are the canonical JSON of the frame without
// its "hash" member:
//
//	{"attrs":…,"audit_id":"…","kind":"…","prev_hash":"…","seq":N,"timestamp":"…"}
//
// hash is the lowercase hex SHA-256 of prev_hash (as its hex text) followed
// by those bytes, and prev_hash is the previous frame's hash ("" for seq 1,
// or the "base" hash once compaction has removed older frames). Changing any
// byte of a stored frame, removing one, or reordering them breaks the chain,
// and Verify names the first seq where it breaks.
//
// # Durability and group commit
//
// A write is a function that runs inside a bbolt read-write transaction.
// A writer that finds no commit running commits its own write at once, in
// its own goroutine; writers that arrive while a commit runs queue, and the
// commit loop takes everything queued since its previous commit (up to
// MaxBatch), runs it in one transaction and commits it, then answers each
// writer, until nothing is queued. A lone writer pays exactly one commit,
// hands its write to no other goroutine and never waits on a timer; a crowd
// shares one commit. If one writer's
// function fails, its transaction is rolled back and the others are retried
// without it, so a function may run more than once and must act only through
// the transaction it is given. A commit that fails fails exactly the writes
// that were in it. AppendDecision and RecordPreflight put attrs in
// canonical form (and pack them) in the writer's goroutine, before queueing,
// and Consume builds its two frames there for the result it expects (the
// first step it admits, consumed; the commit builds them again only when
// the result differs), so the commit every writer waits on spends its time
// on bbolt. TestCommitPages counts the pages each path's commit writes,
// bucket by bucket (docs/PERFORMANCE.md, "Commit pages").
//
// # Durable before answered
//
// Every write is durable before its caller is answered: a preflight with
// its binding, session and idempotency records; a consumed marker with its
// frame and the decision that goes with it; and every other decision
// frame, a deny's included. A deny changes no state, but its answer hands
// out an audit id the caller may look up at once, and a crash right after
// the answer must not lose the decision (docs/API.md: every gated request
// writes one autonomy.decision frame). What keeps denies cheap is group
// commit, not skipping the wait: writers that arrive while a commit runs
// share the next one, so under load a commit carries dozens of decisions
// for its two fdatasyncs, and a lone writer still pays exactly one commit,
// with no timer (measured in docs/PERFORMANCE.md).
//
// Commits also keep the 0.5 to 2 MiB past the file's high-water mark
// written with zeros (ahead.go), so a commit's new pages overwrite blocks
// that exist rather than fill a hole, whose fdatasync would also write the
// file system's allocation metadata. The zeros lie in pages bbolt has not
// allocated; the file is that much longer than bbolt alone would make it.
// Because those blocks would let commits go on on a full disk, a commit
// fails while the file system has less than MinFreeBytes free, and when a
// refill of the zeros fails.
//
// # Retention
//
// Compact removes a prefix of the log: frames older than a cut-off, up to
// the first frame that must stay (one not older than the cut-off, or an
// autonomy.preflight frame whose binding expires after it). With the frames
// go their audit index entries, the preflights entry and consumed markers
// of each removed preflight, the idempotency records naming a removed
// preflight, and a session's attempt count once its retired count reaches
// it. The last removed frame becomes "base", where Verify starts the chain.
//
// Byte slices read from bbolt are valid only inside the transaction that
// read them; every accessor in this package copies what it returns.
package wal
