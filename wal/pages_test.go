package wal

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/contractrefine/autonomy/internal/ids"
	"github.com/contractrefine/autonomy/preflight"
)

// The commit page counter: which pages of the file a commit writes, per
// bucket. bbolt copies every page it changes to a new page id, so the pages
// a commit wrote into a bucket are those its tree holds after the commit
// and did not hold before; the counter reads the trees from the file itself
// (bbolt's page layout, go.etcd.io/bbolt/internal/common), branch pages in
// full and of the leaves only their headers.

// page layout of bbolt's file (little-endian, as bbolt writes it on every
// platform this runs on).
const (
	pgHeader     = 16 // id uint64, flags uint16, count uint16, overflow uint32
	pgElement    = 16 // branch: pos, ksize uint32, pgid uint64; leaf: flags, pos, ksize, vsize uint32
	pgBranch     = 0x01
	pgLeaf       = 0x02
	pgBucketLeaf = 0x01 // a leaf element that is a bucket
	pgNoFreelist = ^uint64(0)
	metaRootAt   = pgHeader + 16 // after magic, version, pageSize, flags
	metaFreeAt   = metaRootAt + 16
	metaSizeAt   = pgHeader + 8 // after magic, version
	metaTxidAt   = metaFreeAt + 16
)

// fileTrees is the page ids of every bucket's tree ("(root)": the tree of
// bucket headers) and the freelist's pages.
type fileTrees struct {
	pages    map[string]map[uint64]bool
	freelist uint64 // pgNoFreelist when none is written
	freeLen  int    // the freelist's pages
}

func readTrees(t testing.TB, path string) fileTrees {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	pageSize := 4096 // until the meta page says
	read := func(id uint64, n int) []byte {
		b := make([]byte, n)
		if _, err := f.ReadAt(b, int64(id)*int64(pageSize)); err != nil {
			t.Fatalf("page %d: %v", id, err)
		}
		return b
	}
	// The newer of the two meta pages is the committed one.
	pageSize = int(binary.LittleEndian.Uint32(read(0, 4096)[metaSizeAt:]))
	var meta []byte
	for id := uint64(0); id < 2; id++ {
		m := read(id, pageSize)
		if meta == nil || binary.LittleEndian.Uint64(m[metaTxidAt:]) > binary.LittleEndian.Uint64(meta[metaTxidAt:]) {
			meta = m
		}
	}
	ft := fileTrees{pages: map[string]map[uint64]bool{}, freelist: binary.LittleEndian.Uint64(meta[metaFreeAt:])}
	if ft.freelist != pgNoFreelist {
		ft.freeLen = 1 + int(binary.LittleEndian.Uint32(read(ft.freelist, pgHeader)[12:]))
	}
	full := func(id uint64) []byte {
		h := read(id, pgHeader)
		return read(id, (1+int(binary.LittleEndian.Uint32(h[12:])))*pageSize)
	}
	// walk adds the tree at id to set; leaves, the root bucket's only, are
	// passed to leaf.
	var walk func(id uint64, set map[uint64]bool, leaf func([]byte))
	walk = func(id uint64, set map[uint64]bool, leaf func([]byte)) {
		set[id] = true
		p := full(id)
		n := int(binary.LittleEndian.Uint16(p[10:]))
		switch binary.LittleEndian.Uint16(p[8:]) {
		case pgLeaf:
			if leaf != nil {
				leaf(p)
			}
		case pgBranch:
			for i := range n {
				child := binary.LittleEndian.Uint64(p[pgHeader+i*pgElement+8:])
				if leaf == nil && binary.LittleEndian.Uint16(read(child, pgHeader)[8:]) == pgLeaf {
					set[child] = true // a leaf of a bucket: only its id counts
					continue
				}
				walk(child, set, leaf)
			}
		default:
			t.Fatalf("page %d: neither branch nor leaf", id)
		}
	}
	root := map[uint64]bool{}
	walk(binary.LittleEndian.Uint64(meta[metaRootAt:]), root, func(p []byte) {
		for i := range int(binary.LittleEndian.Uint16(p[10:])) {
			e := p[pgHeader+i*pgElement:]
			if binary.LittleEndian.Uint32(e)&pgBucketLeaf == 0 {
				continue
			}
			pos, ks := int(binary.LittleEndian.Uint32(e[4:])), int(binary.LittleEndian.Uint32(e[8:]))
			at := pgHeader + i*pgElement + pos
			name := string(p[at : at+ks])
			set := map[uint64]bool{}
			if sub := binary.LittleEndian.Uint64(p[at+ks:]); sub != 0 { // 0: inline in the header
				walk(sub, set, nil)
			}
			ft.pages[name] = set
		}
	})
	ft.pages["(root)"] = root
	return ft
}

// commitPages is what one commit wrote: pages per bucket, freelist and
// meta pages, and bbolt's count of writes (one pwrite a page, overflow
// included, and one for the meta page).
type commitPages struct {
	bucket   map[string]int
	freelist int
	meta     int
	writes   int64
}

func (c *commitPages) total() int {
	n := c.freelist + c.meta
	for _, v := range c.bucket {
		n += v
	}
	return n
}

func boltWrites(db *DB) int64 {
	st := db.bolt.Stats()
	return st.TxStats.GetWrite()
}

// countCommit runs fn as one commit of db and counts what it wrote.
func countCommit(t testing.TB, db *DB, fn func(*Tx) error) commitPages {
	t.Helper()
	before := readTrees(t, db.Path())
	w0 := boltWrites(db)
	if err := db.Update(context.Background(), fn); err != nil {
		t.Fatal(err)
	}
	after := readTrees(t, db.Path())
	c := commitPages{bucket: map[string]int{}, meta: 1, writes: boltWrites(db) - w0}
	for name, set := range after.pages {
		for id := range set {
			if !before.pages[name][id] {
				c.bucket[name]++
			}
		}
	}
	if after.freelist != pgNoFreelist && after.freelist != before.freelist {
		c.freelist = after.freeLen
	}
	return c
}

// pagesFixture is a log filled in the service's proportions (a preflight
// with a session attempt, its consumed marker and decision, ids made by
// internal/ids), and the bindings recorded for the consumes measured.
type pagesFixture struct {
	db       *DB
	spent    preflight.Binding
	decision json.RawMessage
	n        int
}

func newPagesFixture(t testing.TB, sets int) *pagesFixture {
	t.Helper()
	px := &pagesFixture{db: openTest(t, &Options{NoSync: true}),
		decision: json.RawMessage(`{"outcome":"pass","reason":"contract: passed","checks":[` +
			strings.Repeat(`{"contract":"contract: scope","outcome":"pass","detail":"tool.echo is allowed in zone default"},`, 12) +
			`{"contract":"contract: budget","outcome":"pass"}]}`)}
	const chunk = 1000
	for start := 0; start < sets; start += chunk {
		err := px.db.Update(context.Background(), func(tx *Tx) error {
			for range min(chunk, sets-start) {
				bd := px.binding()
				if _, err := tx.RecordPreflight(px.record(bd)); err != nil {
					return err
				}
				if _, err := tx.Consume(px.consume(bd)); err != nil {
					return err
				}
				px.spent = bd
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	return px
}

func (px *pagesFixture) binding() preflight.Binding {
	px.n++
	id := ids.Preflight()
	return preflight.Binding{PreflightID: id, AuditID: ids.Audit(), Outcome: preflight.OutcomePass,
		ActorID: "user:load", ExpiresAt: t0.Add(5 * 60e9),
		Steps: []preflight.BoundStep{{ID: "s1", Kind: "tool.echo", ArgsDigest: "sha256:44136fa355b3678a1146ad16f7e8649e94fb4fc21fe77e8310c060f61caaff8a"}}}
}

func (px *pagesFixture) record(bd preflight.Binding) PreflightRecord {
	return PreflightRecord{Binding: bd, Decision: px.decision, Time: t0,
		SessionKey: fmt.Sprintf(`["user:load","session:run-%d","sha256:plan"]`, px.n)}
}

func (px *pagesFixture) consume(bd preflight.Binding) ConsumeRequest {
	return ConsumeRequest{Binding: &bd, Kind: "tool.echo", RequestID: fmt.Sprintf("req-%d", px.n), Time: t0,
		Decision: func(ConsumeResult) FrameInput {
			return FrameInput{Kind: KindDecision, AuditID: bd.AuditID, Time: t0, Attrs: decisionAttrs(px.n)}
		}}
}

// pagePaths are the service's writes, each as the function a writer queues.
// prepare, when set, runs (and commits) before the counted commit.
var pagePaths = []struct {
	name    string
	prepare func(*pagesFixture, int) []preflight.Binding
	write   func(*pagesFixture, []preflight.Binding, int) func(*Tx) error
}{
	{"consume", func(px *pagesFixture, n int) []preflight.Binding {
		bs := make([]preflight.Binding, n)
		err := px.db.Update(context.Background(), func(tx *Tx) error {
			for i := range bs {
				bs[i] = px.binding()
				if _, err := tx.RecordPreflight(px.record(bs[i])); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			panic(err)
		}
		return bs
	}, func(px *pagesFixture, bs []preflight.Binding, i int) func(*Tx) error {
		return func(tx *Tx) error {
			res, err := tx.Consume(px.consume(bs[i]))
			if err == nil && res.Status != Consumed {
				err = fmt.Errorf("consume: %v", res.Status)
			}
			return err
		}
	}},
	{"replay deny", nil, func(px *pagesFixture, _ []preflight.Binding, i int) func(*Tx) error {
		return func(tx *Tx) error {
			_, err := tx.Append(FrameInput{Kind: KindDecision, AuditID: px.spent.AuditID, Time: t0, Attrs: decisionAttrs(i)})
			return err
		}
	}},
	{"no-header deny", nil, func(px *pagesFixture, _ []preflight.Binding, i int) func(*Tx) error {
		return func(tx *Tx) error {
			_, err := tx.Append(FrameInput{Kind: KindDecision, AuditID: ids.Audit(), Time: t0, Attrs: decisionAttrs(i)})
			return err
		}
	}},
	{"preflight", nil, func(px *pagesFixture, _ []preflight.Binding, i int) func(*Tx) error {
		return func(tx *Tx) error {
			_, err := tx.RecordPreflight(px.record(px.binding()))
			return err
		}
	}},
}

// measurePages counts commits of each path on a log of sets preflights,
// serial (one write a commit) and batched (batch writes a commit, what 64
// callers share), and returns the mean per commit, path by path.
func measurePages(t testing.TB, sets, commits, batch int) map[string][2]commitPages {
	out := map[string][2]commitPages{}
	px := newPagesFixture(t, sets)
	for _, p := range pagePaths {
		var means [2]commitPages
		for k, size := range []int{1, batch} {
			sum := commitPages{bucket: map[string]int{}}
			for range commits {
				var bs []preflight.Binding
				if p.prepare != nil {
					bs = p.prepare(px, size)
				}
				c := countCommit(t, px.db, func(tx *Tx) error {
					for i := range size {
						if err := p.write(px, bs, i)(tx); err != nil {
							return err
						}
					}
					return nil
				})
				// Every page counted is one of bbolt's writes, and back.
				if int64(c.total()) != c.writes {
					t.Fatalf("%s: counted %d pages, bbolt wrote %d", p.name, c.total(), c.writes)
				}
				for b, v := range c.bucket {
					sum.bucket[b] += v
				}
				sum.freelist += c.freelist
				sum.meta += c.meta
				sum.writes += c.writes
			}
			means[k] = sum
		}
		out[p.name] = means
	}
	return out
}

// TestCommitPages counts the pages each path's commit writes, per bucket,
// and checks the count against bbolt's own count of writes. With -v it
// prints the table docs/PERFORMANCE.md ("Commit pages") shows.
func TestCommitPages(t *testing.T) {
	// WAL_PAGES_SETS sets the fill (docs/PERFORMANCE.md uses 5,000:
	// three levels in every index, as in a long-running log).
	sets, commits := 1000, 10
	if testing.Short() {
		sets, commits = 200, 5
	}
	if v := os.Getenv("WAL_PAGES_SETS"); v != "" {
		var err error
		if sets, err = strconv.Atoi(v); err != nil {
			t.Fatal(err)
		}
		commits = 20
	}
	const batch = 20
	res := measurePages(t, sets, commits, batch)
	var names []string
	for _, m := range res {
		for _, c := range m {
			for b := range c.bucket {
				if !slices.Contains(names, b) {
					names = append(names, b)
				}
			}
		}
	}
	slices.Sort(names)
	var sb strings.Builder
	fmt.Fprintf(&sb, "%d preflights filled, %d commits each; pages per commit\n| path | writes/commit |", sets, commits)
	for _, n := range names {
		fmt.Fprintf(&sb, " %s |", n)
	}
	sb.WriteString(" freelist | meta | pages (pwrite calls) |\n")
	for _, p := range pagePaths {
		for k, size := range []int{1, batch} {
			c := res[p.name][k]
			fmt.Fprintf(&sb, "| %s | %d |", p.name, size)
			for _, n := range names {
				fmt.Fprintf(&sb, " %.1f |", float64(c.bucket[n])/float64(commits))
			}
			fmt.Fprintf(&sb, " %.1f | %.1f | %.1f |\n", float64(c.freelist)/float64(commits),
				float64(c.meta)/float64(commits), float64(c.writes)/float64(commits))
		}
	}
	t.Log("\n" + sb.String())
}
