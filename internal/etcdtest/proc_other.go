//go:build !linux

package etcdtest

import (
	"os"
	"os/signal"
	"syscall"
)

func childAttr() *syscall.SysProcAttr { return nil }

func signalNotify(c chan os.Signal) { signal.Notify(c, syscall.SIGTERM, syscall.SIGINT) }
