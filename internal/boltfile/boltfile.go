// Package boltfile reads and damages a bbolt file's pages by their
// on-disk layout, for the tests of what the WAL's tools find in a damaged
// log: bbolt's API can write no such damage.
package boltfile

import (
	"encoding/binary"
	"fmt"
	"os"
	"slices"
)

// The on-disk layout (bbolt's internal/common): a page starts with a
// 16-byte header (id u64, flags u16, count u16, overflow u32); a meta
// page's body follows it (magic, version, page size and flags, u32 each;
// the root bucket's page id and sequence; the freelist's page id; the
// high-water mark; the transaction id; a checksum, u64 each).
const (
	headerSize       = 16
	metaPageSize     = headerSize + 8
	metaRoot         = headerSize + 16
	metaFreelist     = headerSize + 32
	metaHighWater    = headerSize + 40
	metaTxid         = headerSize + 48
	freelistFlag     = 0x10
	freelistMaxCount = 0xFFFF
)

// Meta is what the active meta page says.
type Meta struct {
	PageSize int64
	Root     uint64 // the root bucket's page id
	Freelist uint64 // the freelist's page id
	// HighWater is the first page id past the file's last page in use.
	HighWater uint64
}

// ReadMeta reads the active meta page (the one with the higher
// transaction id) of the bbolt file at path.
func ReadMeta(path string) (Meta, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return Meta{}, err
	}
	le := binary.LittleEndian
	if len(b) < metaTxid+8 {
		return Meta{}, fmt.Errorf("boltfile: %s is too short", path)
	}
	size := int64(le.Uint32(b[metaPageSize:]))
	if int64(len(b)) < size+metaTxid+8 {
		return Meta{}, fmt.Errorf("boltfile: %s is too short", path)
	}
	at := int64(0)
	if le.Uint64(b[size+metaTxid:]) > le.Uint64(b[metaTxid:]) {
		at = size
	}
	return Meta{PageSize: size, Root: le.Uint64(b[at+metaRoot:]), Freelist: le.Uint64(b[at+metaFreelist:]),
		HighWater: le.Uint64(b[at+metaHighWater:])}, nil
}

// ListFree adds page id to the freelist of the bbolt file at path, in
// its sorted place: a page in use that bbolt would hand out again.
func ListFree(path string, id uint64) error {
	return editPage(path, func(m Meta) uint64 { return m.Freelist }, func(page []byte) error {
		le := binary.LittleEndian
		count := int(le.Uint16(page[10:]))
		if le.Uint16(page[8:]) != freelistFlag || count >= freelistMaxCount-1 || headerSize+8*(count+1) > len(page) {
			return fmt.Errorf("boltfile: page %d is not a small freelist", le.Uint64(page))
		}
		ids := make([]uint64, count, count+1)
		for i := range ids {
			ids[i] = le.Uint64(page[headerSize+8*i:])
		}
		ids = append(ids, id)
		slices.Sort(ids)
		le.PutUint16(page[10:], uint16(len(ids)))
		for i, v := range ids {
			le.PutUint64(page[headerSize+8*i:], v)
		}
		return nil
	})
}

// Overwrite fills page id of the bbolt file at path with b's bytes.
func Overwrite(path string, id uint64, b byte) error {
	return editPage(path, func(Meta) uint64 { return id }, func(page []byte) error {
		for i := range page {
			page[i] = b
		}
		return nil
	})
}

// editPage reads the page of the file at path that pick chooses, lets
// edit change it and writes it back.
func editPage(path string, pick func(Meta) uint64, edit func(page []byte) error) error {
	m, err := ReadMeta(path)
	if err != nil {
		return err
	}
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return err
	}
	defer f.Close()
	at := int64(pick(m)) * m.PageSize
	page := make([]byte, m.PageSize)
	if _, err := f.ReadAt(page, at); err != nil {
		return err
	}
	if err := edit(page); err != nil {
		return err
	}
	_, err = f.WriteAt(page, at)
	return err
}
