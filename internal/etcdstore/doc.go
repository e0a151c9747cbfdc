// Package etcdstore keeps the state that decides answers (internal/state)
// in etcd, so several replicas of the service answer as one: a preflight
// recorded on one replica binds on every other, and a step consumed on one
// is consumed on all.
//
// # Keys
//
// Every key starts with the configured prefix P (store.etcd.prefix):
//
//	P b/<preflight_id>                 binding: its record as JSON, a newline, the decision bytes as returned
//	P a/<audit_id>                     the outcome of the preflight recorded under the audit id
//	P c/<preflight_id>/<step, 4 digits> consumed marker: JSON {"request_id","args_digest","at","replica"}
//	P s/<session key>                  repair-session counters: JSON {"attempts","repair_from"}
//	P i/<idempotency key>              idempotency record: JSON {"request_digest","preflight_id"}
//	P ic/<idempotency key>             a claim of the key by a submission being decided
//	P sl/<session key>/…               the lock of a repair session (clientv3/concurrency)
//	P f/<audit_id>/<replica>/<seq, 16 hex digits>  a copy of a frame in the writing replica's log
//
// # Consume-once
//
// A consume is one sub-transaction on the step's marker:
//
//	If(CreateRevision(P c/id/step) = 0, CreateRevision(P b/id) > 0)
//	Then(Put(P c/id/step))
//	Else(Get(P b/id), Get(P c/id/ …))
//
// It commits (an etcd quorum) before the allow is answered; of any number
// of concurrent consumes on any replicas exactly one succeeds. On failure
// the Else branch brings back every marker of the binding, from which the
// store answers Repeated (the same x-request-id and call), Replay, Gone or
// tries the next free step of the kind. The autonomy.preflight_consumed and
// decision frames then go to the replica's own WAL and their copies to
// etcd; a failure there returns an error (the caller denies with 503), and
// the step stays spent: a retry under the same request id is Repeated.
//
// The sub-transactions of a replica's concurrent consumes share one etcd
// transaction (Txn().Then(OpTxn(…), OpTxn(…), …), etcd 3.3 and later),
// as the frame copies do (batch.go: no timer, two in flight, so a lone
// consume waits one round trip). etcd decides each sub-transaction on its
// own within the one raft entry, so a taken marker fails only its own
// attempt. etcd refuses a transaction that puts one key twice, even in
// exclusive branches of sibling sub-transactions, so a transaction carries
// one attempt per marker key, and the other attempts queued on that key
// before it was sent take its answer: the leader's marker put means the
// step is taken for them (Repeated when it is their own request id and
// call), its failure gives them its reads. At most 126 sub-transactions
// and 1 MiB go in one: etcd allows a nested transaction --max-txn-ops (128
// by default) less its parent's operations, and each has two. An etcd error fails every attempt of
// the transaction (503); it is sent under the store's context, so one
// caller's deadline ends that caller's wait, not the others' attempts.
// A peek (what a consume would do, without writing) reads the binding's
// key and markers; concurrent peeks read side by side in one read-only
// transaction, which etcd serves without a raft entry.

// # Frames
//
// Each replica writes every frame to its own hash-chained WAL first, and a
// copy to P f/…, before the answer that depends on it; the copies of
// concurrent calls share transactions (batch.go: up to 128 puts or 1 MiB,
// two in flight), so a lone call waits one round trip and a busy replica
// sends far fewer requests than calls. GET /v1/audit reads the
// copies of every replica (and the local log, for frames whose copies
// expired), so it answers the same on every live replica, also after the
// writer died. A preflight's frame is written before its binding, so a
// binding in etcd always has its frame somewhere; a write refused as a
// conflict after the frame leaves the frame in the local log alone, which
// `autonomy wal check-store` reports.
//
// The copy follows the local commit; it does not overlap its fsync. A copy
// sent once the frames' seqs and hashes are final but before they are on
// the replica's disk was tried, and the crash soak on etcd refuted it: a
// replica killed between the copy's commit and its own fsync comes back
// with the copy in etcd naming a seq its log never had, reuses that seq
// for its next frame, and the chain the other replicas' audit join shows
// forks from the replica's own (check-store: copy_without_frame, then
// copy_differs). Carrying the decision frames' content in the marker's
// transaction, the full copy following asynchronously, would take the copy
// off an allowed consume's path without that fork, but only for allowed
// consumes (a replay's or a policy's deny writes no marker), and the audit
// join would show a frame without seq or hash until its copy arrives, so
// two replicas could answer one audit id differently for a while; it is
// not built.
//
// # Leases
//
// Records expire with leases, not a sweeper: every record written in the
// same time bucket (record_ttl/24, at least a second, at most an hour)
// shares one lease of record_ttl plus the bucket's width, granted by the
// first write of the bucket. A record thus lives between record_ttl and
// record_ttl plus one bucket, whoever wrote it and whether or not that
// replica still runs; etcd holds at most about 25 leases per replica.
// Claims and session locks use one lease per process, kept alive while it
// runs (10 s), so a holder's death frees them within seconds.
package etcdstore
