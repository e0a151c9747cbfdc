//go:build linux

package wal

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/contractrefine/autonomy/internal/benchutil"
)

// residentBytes is how much of the file at path is mapped in this process.
func residentBytes(t *testing.T, path string) int64 {
	t.Helper()
	n, err := benchutil.MappedRSS(os.Getpid(), path)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func addrOf(m []byte) uintptr { return uintptr(unsafe.Pointer(&m[0])) }

// releaseMapped unmaps a file mapping's pages, which a read had mapped.
func TestReleaseMapped(t *testing.T) {
	path := t.TempDir() + "/mapped"
	const size = 4 << 20
	if err := os.WriteFile(path, make([]byte, size), 0o600); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	m, err := unix.Mmap(int(f.Fd()), 0, size, unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Munmap(m)
	var sum byte
	for i := 0; i < size; i += os.Getpagesize() {
		sum += m[i]
	}
	if got := residentBytes(t, path); got < size/2 {
		t.Fatalf("after reading every page %d bytes are resident, want about %d", got, size)
	}
	if err := releaseMapped(addrOf(m), size); err != nil {
		t.Fatal(err)
	}
	if got := residentBytes(t, path); got > size/16 {
		t.Fatalf("after the release %d bytes are resident, want about 0", got)
	}
	if m[size-1] != 0 || sum != 0 {
		t.Fatal("the released mapping reads other bytes than the file's")
	}
}

// The verification at open and the binding reads after it leave the file
// mostly unmapped: its pages are released after the walk and shortly after
// the reads.
func TestVerifiedLogIsNotLeftMapped(t *testing.T) {
	dir := t.TempDir()
	const sets = 3000
	fillServed(t, dir, sets)
	path := dir + "/" + FileName
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	size := st.Size()
	if size < 4<<20 {
		t.Fatalf("the filled log is %d bytes: too small to tell", size)
	}
	db, err := Open(dir, &Options{NoSync: true, VerifyOnOpen: true})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	<-db.Verified()
	if err := db.Trusted(); err != nil {
		t.Fatal(err)
	}
	if got := residentBytes(t, path); got > size/8 {
		t.Fatalf("after the verification %d of the file's %d bytes are mapped, want at most %d", got, size, size/8)
	}
	for i := range sets {
		if _, err := db.Binding(context.Background(), fmt.Sprintf("pf_verify_%012d", i)); err != nil {
			t.Fatal(err)
		}
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		got := residentBytes(t, path)
		if got <= size/8 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("10 s after %d binding reads %d of the file's %d bytes are mapped, want at most %d", sets, got, size, size/8)
		}
		time.Sleep(releaseInterval / 4)
	}
}
