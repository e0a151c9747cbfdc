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
//	P a/<audit_id>                     the outcome of the preflight recorded under the audit id, then a
//	                                   newline and its tenant when it has one
//	P c/<preflight_id>/<step, 4 digits> consumed marker: JSON {"request_id","args_digest","at","replica"}
//	P s/<session key>                  repair-session counters: JSON {"attempts","repair_from"}
//	P i/<idempotency key>              idempotency record: JSON {"request_digest","preflight_id"}
//	P ic/<idempotency key>             a claim of the key by a submission being decided
//	P sl/<session key>/…               the lock of a repair session (clientv3/concurrency)
//	P f/<audit_id>/<replica>/<seq, 16 hex digits>  a copy of frames in the writing replica's log: the
//	                                   frame of seq, as the log shares it (wal.EncodeFrame), or a list of it
//	                                   and the frames after it of the same commit and audit id, at most
//	                                   16 (wal.EncodeFrameList: a consume's consumed and decision frames)
//	P e/<replica>                      the replica's fence, under a record lease: a lone consume's
//	                                   transaction requires its revision, which moves before lost copies
//	                                   are deleted; an expired fence is put again (fence.go)
//	P l/<replica>                      the replica's presence: its log's instance, under its session's
//	                                   lease; another log finds it held and is not ready (presence.go)
//	P r/<replica>/<seq, 16 hex digits>  copy index: JSON {"base_seq","base_hash","frames"}, put by every copy
//	                                   transaction under its copies' lease; seq is its last frame's, frames
//	                                   the P f/… keys it carries, base the log's head before the newest commit
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
// A marker sent and not answered (etcd stalled) may be applied after its
// caller's 503: the replica keeps it in doubt and logs its consumed frame
// once etcd shows it applied (doubt.go). Attempts still queued when their
// wait runs out are withdrawn, never sent (sendAttempt).
// A repeat reads the audit id's autonomy.preflight_consumed frames (every
// replica's copies and the local log) and, when none records the call it
// repeats (its marker committed but its answer was lost, so its frames
// were withdrawn or never written), logs that consumed frame before its
// decision: an allow never stands without its consume on record.
//
// A lone consume (no shared write transaction of the replica's in flight or
// waiting, no commit of its log running or waiting) is one transaction.
// It takes the log's lead first (wal.Lead: nothing else commits until it
// lets go), fixes the frames it appends should it take the step (seq
// head+1 on, prev_hash, hash: the bytes its commit then stores) and sends
// its first marker's sub-transaction alone, the frames' copies and their
// copy index (base: the head) in its Then branch:
//
//	If(CreateRevision(P c/id/step) = 0, CreateRevision(P b/id) > 0)
//	Then(Put(P c/id/step), Put(P f/…) of its frames, Put(P r/<replica>/<last seq>))
//	Else(Get(P b/id), Get(P c/id/ …))
//
// Once it commits, the allow is answered: the marker and the frames'
// copies are on a quorum's disks, which is durable before answered as the
// local fsync is. The log then commits those frames in the background,
// still leading, so no other frame takes their seqs (commitLone): a
// consume pays one round trip, not a round trip and the local commit. A
// replica killed before that commit ends comes back with the copies past
// its head and takes them up (Frames); a commit that fails holds the log
// and the replica takes them up the same way, retrying until its log has
// them, before it appends again. One consume that finds the previous
// lone one's commit running waits for it (it is one fsync) to lead next;
// others that arrive meanwhile take the shared path at once, as does the
// waiter when the log's lead is taken by then (awaitLone). A marker taken lets go
// of the lead and goes on as above (Then did not run: nothing was
// copied). An etcd error leaves the copies perhaps in etcd: the log is
// held until they are deleted, as after a failed local commit (Frames).
// Holding the lead keeps the replica's other writes waiting for the
// round trip, so only a lone consume or a flat shared transaction
// (below) takes it, and only when no other write of the log runs or
// waits.
//
// The sub-transactions of a replica's concurrent consumes share one etcd
// transaction (Txn().Then(OpTxn(…), OpTxn(…), …), etcd 3.3 and later)
// with the frame copies that wait when it is sent (txns.go: no timer, one
// in flight, so a lone call waits one round trip; a busy replica sends
// one transaction, one raft entry, per round trip instead of one of each
// kind). etcd decides each sub-transaction on its own within the one raft
// entry, so a taken marker fails only its own attempt. etcd refuses a
// transaction that puts one key twice, even in exclusive branches of
// sibling sub-transactions, so a transaction carries one attempt per
// marker key, and the other attempts queued on that key before it was
// sent take its answer: the leader's marker put means the
// step is taken for them (Repeated when it is their own request id and
// call), its failure gives them its reads. Marker, copy and copy index
// keys never meet. A transaction with a sub-transaction has at most 126
// top-level operations (sub-transactions, copy puts, the copy index) and
// 1 MiB: etcd allows a nested transaction --max-txn-ops (128 by default)
// less its parent's operations, and each has two. An etcd error fails
// every attempt (503) and every copy of the transaction (as a copy
// transaction of its own would). A consume whose batcher has its sender
// free sends the batch from its own goroutine (a lone consume wakes no
// other goroutine); a batch of more than its own attempt is sent under the
// store's context, so one caller's deadline ends that caller's wait, not
// the others' attempts; so is every batch with a copy. The frames of the
// consumes whose markers one shared transaction put go to the log in one
// write, appended by the first of them to take its answer (the others
// wait for it), and so to etcd in one copy request: the consumes a
// transaction answers at once commit together rather than the first alone
// and the others after it (consume.go, logGroup).
//
// A shared transaction of two or more markers goes flat first
// (sendFlat): under the log's lead, as a lone consume does, it fixes the
// frames each leader's consume appends and sends
//
//	If(each marker free and its binding there, the fence at its revision)
//	Then(each marker's put, the frames' copies, their copy index,
//	     the batch's other copies and their index)
//	Else(Get(P e/<replica>))
//
// which puts every marker and copy or none. The consumes are answered
// once it commits, and the log commits their frames in the background
// (commitLone). A failed comparison (a marker taken, a binding gone, or
// the fence moved, which the Else read shows) copies nothing and lets go
// of the lead, and the attempts go as the sub-transactions above, one
// round trip later; for flatBackoff (250 ms) after, batches go so at
// once, as a batch of one attempt always does, so that replays cost one
// round trip, not two. A transaction etcd refuses before applying it
// (over --max-txn-ops or --max-request-bytes) is let go the same way,
// with one log line. The sender first waits for the log's commit of the
// led transaction before it (one fsync) for up to ledCommitWait (20 ms),
// once per commit. When the log then commits other writes (the consumes
// a transaction of sub-transactions answered, whose commits wait for
// their copies in this very batch), it sends the batch's copies alone
// and waits up to as long for the log's lead, so that the shared path
// goes back to flat transactions rather than stay with sub-transactions,
// each batch's copies holding the log for the next; when it cannot lead,
// the sub-transactions go. For a crowd of consumes of fresh bindings,
// each pays one round trip rather than two (its marker's, then its
// copies' in the next transaction), and etcd decodes and applies two
// comparisons and two puts per consume rather than a nested transaction
// with two reads, and a put in the next (docs/PERFORMANCE.md, "Flat
// shared transactions").
//
// The compare on the binding's key makes etcd read the binding's whole
// value (a compare reads the key's record; the Else branch's count-only
// range does not). It stays: record_ttl >= binding_window (config
// validation) makes the record of a binding that was recorded and has not
// expired certain (the cache of recent bindings relies on it), but the
// store is not told that the binding it is handed was recorded, and a
// consume of a binding etcd does not hold (never recorded, or removed by
// an operator or a restore) must answer Gone, not spend a step (the
// state contract, statetest's consumeSteps); without the compare etcd
// would put the marker. The value's size is not what the compare costs:
// on one member, a compare on a binding of 1.8 KB took 6.7 µs of its CPU
// and one on a 4-byte key 5.5 µs. The rest is the index lookup and the
// backend read, which any key standing for the binding costs too. A small
// key put with the binding under its lease would save that 1.2 µs of a
// consume's 250 to 350 µs and add a leased put to every preflight
// (docs/PERFORMANCE.md, "binding existence key").
//
// A peek (what a consume would do, without writing) reads the binding's
// key and markers; concurrent peeks read side by side in one read-only
// transaction, which etcd serves without a raft entry.
//
// # Frames
//
// Each replica writes every frame to its own hash-chained WAL and a copy
// to P f/…, both durable before the answer that depends on them (a lone
// consume's copies before its answer, its local write after it:
// Consume-once); the
// copies of concurrent calls share transactions, with the consumes'
// marker sub-transactions (txns.go: up to 127 copies and the copy index,
// fewer beside sub-transactions, or 1 MiB, one in flight), so a lone call
// waits one round trip and a busy replica sends far fewer requests than
// calls. GET /v1/audit reads the copies of every replica (and the local
// log, for frames whose copies expired), so it answers the same on every
// live replica, also after the writer died. The frames of one commit
// that follow each other under one audit id (a consume's consumed and
// decision frames; two consumes of one binding in one shared transaction)
// are one copy, one value under the first frame's key (copyRuns):
// each key etcd holds costs its member an index entry, a backend write
// and a lease attachment whatever the value's size, and one put a consume
// rather than two cut the member's CPU a consume at 64 callers by 13 %
// (docs/PERFORMANCE.md, "One copy a consume"). A reader takes a value as
// one frame or a list (wal.DecodeFrameList). A preflight's frame is
// written before its binding, so a binding in etcd always has its frame
// somewhere;
// a write refused as a conflict after the frame leaves the frame in the
// local log alone, which `autonomy wal check-store` reports.
//
// The copy of a consume's or a decision's frames is sent from inside the
// log's commit (wal.DB.AppendStaged; a lone consume's goes with its marker
// before the commit, Consume-once): once every write of the commit has
// run, the frames' seq, prev_hash and hash are final, and the copy's
// transaction goes out while bbolt writes and fsyncs the file; the answer
// waits for both, so a call pays the longer of the fsync and one round
// trip, not their sum. etcd may then hold copies of seqs the log never
// got, which the log's next frames would take for other content (the
// chain the other replicas' audit join shows would fork from the
// replica's own). Two cases, both closed:
//
//   - The local commit fails (a write error, not a crash), or etcd's
//     answer to a lone consume's transaction is an error: the log holds
//     itself (wal.ErrHeld) before it answers any write of that commit, the
//     call answers 503, and the store deletes the copies and their index
//     in the background, once their own transaction has ended, retrying
//     until etcd takes the delete; until then every append and the
//     readiness probe answer 503 (ErrUnavailable), and then the log
//     appends again by itself. The local commit of a lone consume that
//     was answered (Consume-once) fails after its answer: the log is held
//     the same way, and the store takes the frames up from their copies
//     as below (settleCrashCopies), retrying until the log has them.
//   - The process dies between the copy's commit and its fsync: when the
//     store opens it holds the log, reads the copy indexes past the log's
//     head (one range read of P r/<replica>/<head+1>…) and, for those whose
//     base is the head (the commit that was going to the disk), takes up
//     the copies that continue the chain exactly (seq head+1 on, each
//     prev_hash the previous hash, each hash its contents', this replica's)
//     into the log as they are (wal.DB.Adopt), and deletes those after a
//     gap with the indexes; one log line says how many were adopted and
//     dropped. Only then does it release the log. etcd down at that
//     moment keeps the log held, retried in the background, as the
//     replica stays unready until etcd answers anyway. Indexes of another
//     base or of another log's instance (presence.go; every empty log has
//     the same base) were not written by this log (another data directory
//     under the same replica name) and are left alone, for check-store to
//     report.
//     check-store on a stopped replica counts the copies a kill left past
//     its head as pending, not as a problem: the replica settles them
//     before it appends.
//   - The copy fails and the local commit succeeds: a decision's or an
//     outcome's copy is sent again in the background (recopy); a replica
//     that stops first sends it when it opens again, after settling
//     (recopy.go, recopyTail: its newest decision and outcome frames).
//
// A call whose copy was taken up was either never answered (its caller
// saw a dropped connection) or was a lone consume answered on its copies,
// so adopting it records what happened: the marker committed, the frames
// are in both places. The replica must come back within record_ttl for
// its own log to get them; every other replica's audit join shows them
// from their copies meanwhile. An approval's decision goes the lone
// consume's way (approvals.go): its frame's copy rides in the decision's
// own transaction, staged under the log's lead, which an approval waits
// for (wal.DB.Lead), so a decision never stands without its frame; one
// whose transaction's outcome is unknown is read back by the dropper,
// which takes the frame up when etcd took the decision. The copies of
// preflights (with the binding) and outcomes are written after the local
// commit, as before.
//
// Carrying the decision frames' content in the marker's transaction, the
// full copy following asynchronously, was weighed instead: it helps only
// allowed consumes (a replay's or a policy's deny writes no marker), and
// the audit join would show a frame without seq or hash until its copy
// arrives, so two replicas could answer one audit id differently for a
// while.
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
//
// # Preflights
//
// A preflight's record (binding, outcome, frame copy, session counters,
// idempotency record, pending approvals) is one transaction conditioned on
// the revisions of the session's and the idempotency key's records as
// read. A repair session's lock has concurrency.Mutex's layout (a key per
// process lease under the session's lock prefix, the oldest key holding
// it); the request that takes a free lock also reads the session's
// record, so its holder reads nothing more, and the holder's record
// deletes the lock key in its own transaction, so the unlock sends
// nothing after a record that committed: two requests for a preflight in
// a repair session. An idempotency claim likewise reads the key's record
// as it is taken, and the record deletes the claim (if it is still this
// one) in a nested transaction of its own. A lock another replica holds is waited for as
// concurrency.Mutex waits. Records and lock requests of concurrent calls
// share transactions (writes.go: one sub-transaction each, with its own
// comparisons; writes that touch one key go in different transactions).
package etcdstore
