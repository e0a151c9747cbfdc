// Package etcdtest runs real etcd clusters on loopback for tests and the
// load command: one member or three, each member either embedded in the
// calling process (go.etcd.io/etcd/server/v3/embed), in a helper process
// running the same embedded server (so a test can kill -9 it), or an etcd
// server started from its own binary on the PATH (Debian's etcd-server is
// 3.4).
//
// Ports are chosen by the operating system: the harness binds
// 127.0.0.1:0, notes the port and closes the socket before handing it to
// the member, and starts the whole cluster again on fresh ports when a
// member cannot bind (another process took the port in between).
//
// A package whose tests use Process members calls RunMemberIfAsked first
// thing in its TestMain: the helper process is the test binary itself,
// run again with the member's settings in its environment.
package etcdtest
