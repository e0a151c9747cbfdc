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
	"time"

	"github.com/contractrefine/autonomy/internal/benchutil"
	"github.com/contractrefine/autonomy/internal/ids"
	"github.com/contractrefine/autonomy/preflight"
	bolt "go.etcd.io/bbolt"
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

// pagesDecision is a one-step preflight's decision of a real one's size.
var pagesDecision = json.RawMessage(`{"outcome":"pass","reason":"contract: passed","checks":[` +
	strings.Repeat(`{"contract":"contract: scope","outcome":"pass","detail":"tool.echo is allowed in zone default"},`, 12) +
	`{"contract":"contract: budget","outcome":"pass"}]}`)

func newPagesFixture(t testing.TB, sets int) *pagesFixture {
	t.Helper()
	px := &pagesFixture{db: openTest(t, &Options{NoSync: true})}
	px.fill(t, sets)
	return px
}

// fill records sets preflights, each consumed, in big commits.
func (px *pagesFixture) fill(t testing.TB, sets int) {
	t.Helper()
	if px.decision == nil {
		px.decision = pagesDecision
	}
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
// callers share), and returns the sums, path by path, and each bucket's
// depth at the end.
func measurePages(t testing.TB, sets, commits, batch int) (out map[string][2]commitPages, depth map[string]int) {
	out, depth = map[string][2]commitPages{}, map[string]int{}
	px := newPagesFixture(t, sets)
	defer func() {
		_ = px.db.View(func(tx *Tx) error {
			for _, name := range allBuckets {
				depth[string(name)] = tx.btx.Bucket(name).Stats().Depth
			}
			return nil
		})
	}()
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
	return out, depth
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
	res, depth := measurePages(t, sets, commits, batch)
	// A serial write rewrites the last leaf of each bucket it touches and
	// the branches above it, with a split now and then: more would mean
	// its keys landing on scattered leaves.
	for _, p := range pagePaths {
		for b, n := range res[p.name][0].bucket {
			if mean, most := float64(n)/float64(commits), float64(depth[b])+0.6; b != "(root)" && mean > most {
				t.Errorf("%s: %.1f pages a serial commit in %s, %d deep; want at most %.1f", p.name, mean, b, depth[b], most)
			}
		}
	}
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

// BenchmarkCommitCost weighs bbolt settings against each other by what a
// serial consume's commit costs, wall time and the process's CPU (user and
// system), the logs' commits interleaved one by one in one process so that
// every setting sees the same moments of a shared disk: b.N rounds, one
// commit of each setting a round (-benchtime 400x; docs/PERFORMANCE.md).
func BenchmarkCommitCost(b *testing.B) {
	t, rounds := b, b.N
	type setting struct {
		name string
		tune func(*bolt.Options)
	}
	settings := []setting{
		{"4 KiB pages, freelist synced", func(*bolt.Options) {}},
		{"4 KiB pages, no freelist", func(o *bolt.Options) { o.NoFreelistSync = true }},
		{"8 KiB pages, freelist synced", func(o *bolt.Options) { o.PageSize = 8192 }},
		{"8 KiB pages, no freelist", func(o *bolt.Options) { o.PageSize = 8192; o.NoFreelistSync = true }},
		{"16 KiB pages, freelist synced", func(o *bolt.Options) { o.PageSize = 16384 }},
		{"16 KiB pages, no freelist", func(o *bolt.Options) { o.PageSize = 16384; o.NoFreelistSync = true }},
	}
	fixtures := make([]*pagesFixture, len(settings))
	for i, s := range settings {
		dir := t.TempDir()
		db, err := Open(dir, &Options{NoSync: true, tune: s.tune})
		if err != nil {
			t.Fatal(err)
		}
		px := &pagesFixture{db: db}
		px.fill(t, 1000)
		db.Close()
		if px.db, err = Open(dir, &Options{tune: s.tune}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { px.db.Close() })
		fixtures[i] = px
	}
	names := make([]string, len(settings))
	for i, s := range settings {
		names[i] = s.name
	}
	interleaved(t, rounds, names, "serial consumes each", func(i, _ int) func() error {
		px := fixtures[i]
		bs := pagePaths[0].prepare(px, 1)
		return func() error { return px.db.Update(context.Background(), pagePaths[0].write(px, bs, 0)) }
	})
}

// BenchmarkCommitShapes weighs a serial consume's commit against commits
// that write less, on one log of 1,000 consumed preflights, interleaved one
// by one as BenchmarkCommitCost does: the consume (its two frames and its
// consumed marker: the frames tree and the audit index, format version 3),
// a no-header deny (one decision frame and its audit index entry), the
// same frame with no audit id (the frames tree alone) and the least
// durable write (benchutil.LeastWriter, the load command's floor). The
// deny beside the frame alone bounds what a layout in which the frames and
// the audit index shared one tree could save: it would still write an
// index entry, where the frame alone writes none (-benchtime 1000x;
// docs/PERFORMANCE.md).
func BenchmarkCommitShapes(b *testing.B) {
	t := b
	dir := t.TempDir()
	db, err := Open(dir, &Options{NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	px := &pagesFixture{db: db}
	px.fill(t, 1000)
	db.Close()
	if px.db, err = Open(dir, nil); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { px.db.Close() })
	least, err := benchutil.NewLeastWriter(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { least.Close() })
	names := []string{"least durable write", pagePaths[0].name, pagePaths[2].name, "decision frame, no audit id"}
	interleaved(t, b.N, names, "commits each", func(i, round int) func() error {
		switch i {
		case 0:
			return least.Write
		case 1: // the consume's write takes the one binding prepared
			bs := pagePaths[0].prepare(px, 1)
			return func() error { return px.db.Update(context.Background(), pagePaths[0].write(px, bs, 0)) }
		case 2:
			return func() error { return px.db.Update(context.Background(), pagePaths[2].write(px, nil, round)) }
		}
		return func() error {
			return px.db.Update(context.Background(), func(tx *Tx) error {
				_, err := tx.Append(FrameInput{Kind: KindDecision, Time: t0, Attrs: decisionAttrs(round)})
				return err
			})
		}
	})
}

// interleaved runs rounds rounds of one write of each name in turn, the
// write made by next (untimed) and timed alone, and logs each one's wall
// time p50 and p90 and the process's CPU (user and system) p50.
func interleaved(t testing.TB, rounds int, names []string, what string, next func(i, round int) func() error) {
	wall := make([][]time.Duration, len(names))
	cpu := make([][]time.Duration, len(names))
	for r := range rounds {
		for i := range names {
			write := next(i, r)
			c0 := cpuTime(t)
			start := time.Now()
			if err := write(); err != nil {
				t.Fatal(err)
			}
			wall[i] = append(wall[i], time.Since(start))
			cpu[i] = append(cpu[i], cpuTime(t)-c0)
		}
	}
	var sb strings.Builder
	fmt.Fprintf(&sb, "%d %s, interleaved\n| write | commit p50 | p90 | CPU p50 |\n", rounds, what)
	for i, name := range names {
		slices.Sort(wall[i])
		slices.Sort(cpu[i])
		fmt.Fprintf(&sb, "| %s | %d µs | %d µs | %d µs |\n", name, wall[i][rounds/2].Microseconds(),
			wall[i][rounds*9/10].Microseconds(), cpu[i][rounds/2].Microseconds())
	}
	t.Log("\n" + sb.String())
}

// BenchmarkOpenWithoutFreelist measures what bbolt's NoFreelistSync costs
// at Open: without a freelist on disk, Open walks every page of the file to
// find the free ones. It fills a log of WAL_OPEN_FRAMES frames (30,000
// unless set) in the service's proportions and opens it b.N times each way
// (-benchtime 1x; docs/PERFORMANCE.md).
func BenchmarkOpenWithoutFreelist(b *testing.B) {
	t := b
	frames, _ := strconv.Atoi(os.Getenv("WAL_OPEN_FRAMES"))
	if frames <= 0 {
		frames = 30000
	}
	dir := t.TempDir()
	start := time.Now()
	fillServed(t, dir, frames/3)
	t.Logf("filled %d frames in %v", frames/3*3, time.Since(start))
	open := func(noFreelist bool) (took, cpu time.Duration) {
		c0, start := cpuTime(t), time.Now()
		db, err := Open(dir, &Options{tune: func(o *bolt.Options) { o.NoFreelistSync = noFreelist }})
		if err != nil {
			t.Fatal(err)
		}
		took, cpu = time.Since(start), cpuTime(t)-c0
		// A commit writes the meta page in the form the option asks for.
		if err := db.Probe(context.Background()); err != nil {
			t.Fatal(err)
		}
		if !noFreelist {
			c0, start := cpuTime(t), time.Now()
			if rep, err := db.Verify(context.Background()); err != nil || !rep.OK() {
				t.Fatalf("verify: %+v, %v", rep, err)
			}
			t.Logf("verify: %v, CPU %v", time.Since(start), cpuTime(t)-c0)
		}
		if err := db.Close(); err != nil {
			t.Fatal(err)
		}
		return took, cpu
	}
	for range b.N {
		for _, nf := range []bool{false, true, true, false, false} {
			took, cpu := open(nf)
			t.Logf("open, NoFreelistSync %v (the file had the other form before the first of each): %v, CPU %v", nf, took, cpu)
		}
	}
}
