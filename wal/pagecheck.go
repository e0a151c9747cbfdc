package wal

import (
	"errors"
	"fmt"
	"os"
)

// maxPageProblems bounds the problems CheckPages lists; it counts the rest.
const maxPageProblems = 10

// PageReport is what CheckPages found wrong with the file's pages.
type PageReport struct {
	// Problems are the first inconsistencies found, in bbolt's words.
	Problems []string
	// More counts the ones found past maxPageProblems.
	More int
}

// OK reports whether every page was found consistent.
func (r PageReport) OK() bool { return len(r.Problems) == 0 }

// CheckPages runs bbolt's consistency check over the file's pages, which
// the chain walk of Verify does not reach: every page below the
// high-water mark is either in one tree or free, none is freed twice or
// referenced twice, and each tree's keys are in order. A page in use that
// the freelist also lists would be handed out again and overwritten by a
// later commit. The error is for failures to read the log.
//
// A read-only log needs Options.CheckPages. bbolt checks in a goroutine
// of its own, where a fault is not turned into a panic (open.go): the
// file is first checked to reach its high-water mark, so a cut file is
// reported here rather than faulting there. A damaged page that the
// chain's walk did not read (a branch naming a page past the file's end)
// can still fault there and end the process: `wal verify` then exits
// non-zero, never with "ok".
func (db *DB) CheckPages() (PageReport, error) {
	var rep PageReport
	if db.opts.ReadOnly && !db.opts.CheckPages {
		return rep, errors.New("wal: CheckPages on a log opened read-only without Options.CheckPages")
	}
	err := db.View(func(tx *Tx) error {
		st, err := os.Stat(db.path)
		if err != nil {
			return err
		}
		if hwm := tx.btx.Size(); st.Size() < hwm {
			rep.Problems = []string{fmt.Sprintf("the file ends at byte %d, before its last page ends at byte %d: it was cut short", st.Size(), hwm)}
			return nil
		}
		for err := range tx.btx.Check() {
			if len(rep.Problems) < maxPageProblems {
				rep.Problems = append(rep.Problems, err.Error())
			} else {
				rep.More++
			}
		}
		return nil
	})
	return rep, err
}
