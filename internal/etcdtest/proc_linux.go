package etcdtest

import (
	"os"
	"os/signal"
	"syscall"
)

// childAttr makes a member process die with the process that started it,
// so a test binary killed mid-run leaves no etcd behind.
func childAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}

func signalNotify(c chan os.Signal) { signal.Notify(c, syscall.SIGTERM, syscall.SIGINT) }
