package bundle

import (
	"bytes"
	"context"
	"crypto/sha256"
	"embed"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing/fstest"
	"time"

	lru "github.com/hashicorp/golang-lru/v2"
	"github.com/open-policy-agent/opa/v1/ast"
	"github.com/open-policy-agent/opa/v1/loader"
	"github.com/open-policy-agent/opa/v1/rego"
	"github.com/open-policy-agent/opa/v1/storage/inmem"
	"github.com/open-policy-agent/opa/v1/topdown"
	"gopkg.in/yaml.v3"

	"github.com/contractrefine/autonomy/internal/config"
	"github.com/contractrefine/autonomy/internal/strictjson"
	"github.com/contractrefine/autonomy/preflight"
	"github.com/contractrefine/autonomy/preflight/clause"
)

//go:embed default
var defaultFS embed.FS

var (
	// ErrNotBoolean reports that data.autonomy.allow is not a boolean.
	ErrNotBoolean = errors.New("bundle: data.autonomy.allow is not a boolean")
	// ErrCannotDecide reports a policy that fails on every probe input
	// Decides tries: each call it would decide is a 503.
	ErrCannotDecide = errors.New("bundle: the policy cannot decide")
)

// DefaultPolicyTimeout bounds one policy evaluation when Options sets none.
const DefaultPolicyTimeout = 250 * time.Millisecond

// Options configures Load. The zero value is the default.
type Options struct {
	// PolicyTimeout bounds one evaluation of the policy; a policy that runs
	// longer is an evaluation error (deny). Zero means DefaultPolicyTimeout.
	PolicyTimeout time.Duration
	// ClauseCostLimit bounds one CEL clause evaluation. Zero means the clause
	// package's default.
	ClauseCostLimit uint64
	// Kinds is the rule capability names follow (gate.protocol); the zero
	// value, the /v1/tool rule, checks nothing, as before there was a rule.
	Kinds preflight.KindRule
}

// Bundle is a loaded, prepared policy bundle.
type Bundle struct {
	source     string
	revision   string
	governance *preflight.Governance
	clauses    *clause.Set
	allow      rego.PreparedEvalQuery
	denyReason rego.PreparedEvalQuery
	timeout    time.Duration
	reads      inputReads
	// answers keeps the policy's answers by input, nil when they may
	// depend on anything else (answers.go).
	answers *lru.Cache[string, answer]
	// noAllow is set when no module defines data.autonomy.allow (Warnings).
	noAllow bool
	// kinds is the rule plan step kinds follow (Options.Kinds).
	kinds preflight.KindRule
}

// Load loads the bundle in dir, or the embedded default bundle when dir is "".
func Load(ctx context.Context, dir string, opts *Options) (*Bundle, error) {
	var o Options
	if opts != nil {
		o = *opts
	}
	if o.PolicyTimeout <= 0 {
		o.PolicyTimeout = DefaultPolicyTimeout
	}
	var (
		fsys   fs.FS
		root   string
		source string
	)
	if dir == "" {
		fsys, root, source = defaultFS, "default", "embedded default bundle"
	} else {
		st, err := os.Stat(dir)
		if err != nil {
			return nil, fmt.Errorf("bundle %s: %w", dir, err)
		}
		if !st.IsDir() {
			return nil, fmt.Errorf("bundle %s: not a directory", dir)
		}
		snap, err := snapshot(os.DirFS(dir))
		if err != nil {
			return nil, fmt.Errorf("bundle %s: %w", dir, err)
		}
		fsys, root, source = snap, ".", dir
	}
	if err := checkDataSyntax(fsys, root); err != nil {
		return nil, fmt.Errorf("bundle %s: %w", source, err)
	}
	res, err := loader.NewFileLoader().WithFS(fsys).Filtered([]string{root}, onlyBundleFiles)
	if err != nil {
		return nil, fmt.Errorf("bundle %s: %w", source, err)
	}
	if len(res.Modules) == 0 {
		return nil, fmt.Errorf("bundle %s: no .rego files", source)
	}
	gov, err := governanceOf(res.Documents)
	if err == nil {
		err = checkKindNames(gov, o.Kinds)
	}
	if err != nil {
		return nil, fmt.Errorf("bundle %s: %w", source, err)
	}
	clauses, err := clause.Compile(gov.Capabilities, clause.Options{CostLimit: o.ClauseCostLimit})
	if err != nil {
		return nil, fmt.Errorf("bundle %s: %w", source, err)
	}
	b := &Bundle{source: source, governance: gov, clauses: clauses, timeout: o.PolicyTimeout,
		revision: revisionOf(res, root), kinds: o.Kinds}
	store := inmem.NewFromObject(res.Documents)
	compiler := ast.NewCompiler()
	modules := map[string]*ast.Module{}
	for name, m := range res.Modules {
		modules[name] = m.Parsed
	}
	if compiler.Compile(modules); compiler.Failed() {
		return nil, fmt.Errorf("bundle %s: %w", source, compiler.Errors)
	}
	b.reads = inputReadsOf(compiler)
	b.answers = newAnswers(compiler, b.reads)
	b.noAllow = len(compiler.GetRulesExact(allowRef)) == 0
	prepare := func(q string) (rego.PreparedEvalQuery, error) {
		// Strict builtin errors: a builtin that fails (a bad argument, a
		// division by zero) is an evaluation error, so the gate answers 503
		// rather than reading the failure as "not allowed".
		return rego.New(rego.Query(q), rego.Compiler(compiler), rego.Store(store),
			rego.StrictBuiltinErrors(true)).PrepareForEval(ctx)
	}
	if b.allow, err = prepare("data.autonomy.allow"); err != nil {
		return nil, fmt.Errorf("bundle %s: prepare data.autonomy.allow: %w", source, err)
	}
	if b.denyReason, err = prepare("data.autonomy.deny_reason"); err != nil {
		return nil, fmt.Errorf("bundle %s: prepare data.autonomy.deny_reason: %w", source, err)
	}
	return b, nil
}

// snapshotReads bounds how many times snapshot reads a bundle that keeps
// changing under it.
const snapshotReads = 5

// errUnsettled reports a bundle that changed during every read of it.
var errUnsettled = errors.New("the files kept changing while being read; the bundle in force stays")

// snapshot reads the bundle files of fsys into memory, until two reads in
// a row agree. Files are read one at a time, so a bundle replaced while
// being read (a Kubernetes ConfigMap swapping its ..data link, files
// written one after another) could otherwise load as one version's
// policy with another version's data: a bundle nobody wrote, which may
// allow what neither version does. Everything else is loaded from the
// snapshot, so the revision digests exactly what was loaded.
func snapshot(fsys fs.FS) (fstest.MapFS, error) {
	var prev fstest.MapFS
	var missing error
	for range snapshotReads {
		// A file gone between listing its directory and reading it (an old
		// ConfigMap link removed after the swap) is a change too: read again.
		next, err := readBundleFiles(fsys)
		if errors.Is(err, fs.ErrNotExist) {
			prev, missing = nil, err
			continue
		}
		if err != nil {
			return nil, err
		}
		if prev != nil && sameFiles(prev, next) {
			return next, nil
		}
		prev, missing = next, nil
	}
	if missing != nil {
		return nil, missing // still missing at the last read: name it
	}
	return nil, errUnsettled
}

// readBundleFiles reads every file of fsys that OPA's loader reads.
func readBundleFiles(fsys fs.FS) (fstest.MapFS, error) {
	files := fstest.MapFS{}
	err := walkBundle(fsys, func(p string, info fs.FileInfo, err error) error {
		if err != nil || info.IsDir() {
			return err
		}
		b, err := fs.ReadFile(fsys, p)
		if err != nil {
			return err
		}
		files[p] = &fstest.MapFile{Data: b, Mode: 0o444}
		return nil
	})
	return files, err
}

// Dirs returns dir and every directory below it that Load reads, the
// ones to watch for changes to the bundle in dir. An entry that cannot be
// read (a dangling link, which Load refuses) is passed over: once it is
// mended, the change shows in its directory's watch.
func Dirs(dir string) ([]string, error) {
	var dirs []string
	err := walkBundle(os.DirFS(dir), func(p string, info fs.FileInfo, err error) error {
		if err == nil && info.IsDir() {
			dirs = append(dirs, filepath.Join(dir, filepath.FromSlash(p)))
		}
		if p == "." {
			return err // dir itself must be there
		}
		return nil
	})
	return dirs, err
}

// walkBundle calls visit on every file and directory of fsys that OPA's
// loader reads, walking the tree the way the loader does: following
// symbolic links to files and to directories, skipping what
// onlyBundleFiles skips, a directory before what it holds. As with
// fs.WalkDirFunc, an entry that cannot be read is passed to visit with
// its error (and a nil info), and the error visit returns ends the walk.
func walkBundle(fsys fs.FS, visit func(p string, info fs.FileInfo, err error) error) error {
	var walk func(p string, depth int) error
	walk = func(p string, depth int) error {
		info, err := fs.Stat(fsys, p)
		if err != nil {
			return visit(p, nil, err)
		}
		if onlyBundleFiles(p, info, depth) {
			return nil
		}
		if !info.IsDir() {
			return visit(p, info, nil)
		}
		if depth > MaxDepth {
			return fmt.Errorf("%s: directories nested deeper than %d (a symbolic link loop?)", p, MaxDepth)
		}
		if err := visit(p, info, nil); err != nil {
			return err
		}
		entries, err := fs.ReadDir(fsys, p)
		if err != nil {
			return visit(p, nil, err)
		}
		for _, e := range entries {
			if err := walk(path.Join(p, e.Name()), depth+1); err != nil {
				return err
			}
		}
		return nil
	}
	return walk(".", 0)
}

// MaxDepth bounds how deep a bundle's directories are read (and watched
// for changes), so that a symbolic link loop is an error rather than a
// walk until the path is too long.
const MaxDepth = 64

func sameFiles(a, b fstest.MapFS) bool {
	if len(a) != len(b) {
		return false
	}
	for p, f := range a {
		if g, ok := b[p]; !ok || !bytes.Equal(f.Data, g.Data) {
			return false
		}
	}
	return true
}

// depthOf is how deep p is below root: 0 for root itself.
func depthOf(p, root string) int {
	if p == root {
		return 0
	}
	return 1 + strings.Count(strings.TrimPrefix(p, root+"/"), "/")
}

// onlyBundleFiles keeps *.rego files and data.json/data.yaml/data.yml; OPA's
// loader would otherwise read every JSON and YAML file it finds.
func onlyBundleFiles(abspath string, info fs.FileInfo, depth int) bool {
	if info.IsDir() {
		return strings.HasPrefix(info.Name(), ".") && depth > 0
	}
	name := info.Name()
	switch {
	case strings.HasSuffix(name, "_test.rego"):
		return true
	case strings.HasSuffix(name, ".rego"):
		return false
	case name == "data.json" || name == "data.yaml" || name == "data.yml":
		return false
	}
	return true
}

// checkDataSyntax parses each data file the loader will read, so that a
// syntax error names its file and line: OPA's loader reports a JSON error
// by byte offset only, and a YAML one after converting it to JSON.
func checkDataSyntax(fsys fs.FS, root string) error {
	return fs.WalkDir(fsys, root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		if onlyBundleFiles(p, info, depthOf(p, root)) {
			if d.IsDir() {
				return fs.SkipDir
			}
			return nil
		}
		if d.IsDir() || strings.HasSuffix(p, ".rego") {
			return nil
		}
		b, err := fs.ReadFile(fsys, p)
		if err != nil {
			return err
		}
		var v any
		if strings.HasSuffix(p, ".json") {
			var syntax *json.SyntaxError
			if err := json.Unmarshal(b, &v); errors.As(err, &syntax) {
				line := 1 + bytes.Count(b[:syntax.Offset], []byte("\n"))
				return fmt.Errorf("%s: line %d: %v", p, line, err)
			}
			return nil
		}
		dec := yaml.NewDecoder(bytes.NewReader(b))
		if err := dec.Decode(&v); err != nil && !errors.Is(err, io.EOF) {
			return fmt.Errorf("%s: %v", p, err) // yaml's own error names the line
		}
		// OPA's loader reads the first document alone: a second one would
		// be dropped unread, with the capabilities or data it holds.
		if err := config.NoMoreDocuments(dec); err != nil {
			return fmt.Errorf("%s: %w; OPA reads the first one alone", p, err)
		}
		return nil
	})
}

// checkKindNames refuses a capability that no call could name: with the
// MCP rule, a tools/call names its tool in params.name, and a capability
// whose name breaks MCP's tool-name rule would govern nothing.
func checkKindNames(gov *preflight.Governance, rule preflight.KindRule) error {
	if rule != preflight.KindRuleMCP {
		return nil
	}
	if bad := unnamable(gov, rule); len(bad) > 0 {
		return fmt.Errorf("data: autonomy.capabilities[%q]: not an MCP tool name (gate.protocol: mcp wants %s)", bad[0], rule.Pattern())
	}
	return nil
}

// unnamable are the capabilities whose names rule refuses, sorted.
func unnamable(gov *preflight.Governance, rule preflight.KindRule) []string {
	var kinds []string
	for kind := range gov.Capabilities {
		if !rule.Valid(kind) {
			kinds = append(kinds, kind)
		}
	}
	sort.Strings(kinds)
	return kinds
}

// governanceOf decodes data.autonomy strictly, so a misspelt key is a load
// error naming it rather than a silently ignored setting.
func governanceOf(docs map[string]any) (*preflight.Governance, error) {
	raw, ok := docs["autonomy"]
	gov := &preflight.Governance{Capabilities: map[string]preflight.Capability{}}
	if !ok {
		return gov, nil
	}
	m, ok := raw.(map[string]any)
	if !ok {
		return nil, errors.New("data: autonomy must be an object")
	}
	for key := range m {
		if key != "capabilities" && key != "attestation" {
			return nil, fmt.Errorf("data: autonomy.%s: unknown key (want capabilities, attestation)", key)
		}
	}
	if caps, ok := m["capabilities"].(map[string]any); ok {
		kinds := make([]string, 0, len(caps))
		for k := range caps {
			kinds = append(kinds, k)
		}
		sort.Strings(kinds)
		for _, kind := range kinds {
			var c preflight.Capability
			if err := strictDecode(caps[kind], &c); err != nil {
				return nil, fmt.Errorf("data: autonomy.capabilities[%q]: %w", kind, err)
			}
			if err := c.Approval.Validate(); err != nil {
				return nil, fmt.Errorf("data: autonomy.capabilities[%q].approval: %w", kind, err)
			}
			gov.Capabilities[kind] = c
		}
	} else if m["capabilities"] != nil {
		return nil, errors.New("data: autonomy.capabilities must be an object")
	}
	if att, ok := m["attestation"]; ok {
		if err := strictDecode(att, &gov.Attestation); err != nil {
			return nil, fmt.Errorf("data: autonomy.attestation: %w", err)
		}
	}
	if gov.Attestation.MaxAge == 0 {
		gov.Attestation.MaxAge = preflight.Duration(preflight.DefaultAttestationMaxAge)
	}
	return gov, nil
}

// strictDecode decodes one governance object into its struct: an unknown
// field is an error, and so are two names strictjson's rule holds for one
// (encoding/json would fill the field from whichever came last).
func strictDecode(v any, into any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	if err := strictjson.CheckNames(b); err != nil {
		return err
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	return dec.Decode(into)
}

// revisionOf digests the bundle's files, so every decision frame can name
// the exact policy it was made under.
func revisionOf(res *loader.Result, root string) string {
	h := sha256.New()
	// Names are the files' paths within the bundle, so the embedded bundle
	// (loaded under "default/") and the same files loaded from a directory
	// have one revision.
	names := make([]string, 0, len(res.Modules))
	rel := make(map[string]string, len(res.Modules))
	for name := range res.Modules {
		r := strings.TrimPrefix(name, root+"/")
		names = append(names, r)
		rel[r] = name
	}
	sort.Strings(names)
	// Each part is prefixed by its length, so no two bundles digest the
	// same bytes (without it, a file whose text ends in another file's
	// name and text read the same as the two files).
	part := func(b []byte) {
		h.Write(binary.AppendUvarint(nil, uint64(len(b))))
		h.Write(b)
	}
	for _, name := range names {
		part([]byte(name))
		part(res.Modules[rel[name]].Raw)
	}
	data, _ := json.Marshal(res.Documents) // map keys are sorted
	part(data)
	return hex.EncodeToString(h.Sum(nil))[:16]
}

// Source names where the bundle was loaded from.
func (b *Bundle) Source() string { return b.source }

// Revision is a short digest of the bundle's contents.
func (b *Bundle) Revision() string { return b.revision }

// Governance returns the bundle's governance data. Callers must not modify it.
func (b *Bundle) Governance() *preflight.Governance { return b.governance }

// Clauses returns the compiled clauses of the bundle's capabilities.
func (b *Bundle) Clauses() preflight.ClauseChecker { return b.clauses }

// ClauseSet returns the compiled clauses with their reporting methods.
func (b *Bundle) ClauseSet() *clause.Set { return b.clauses }

// allowRef is the rule the gate asks.
var allowRef = ast.MustParseRef("data.autonomy.allow")

// Warnings are what check-config and serve say of a bundle that loads but
// cannot be what its author meant: a policy that defines no
// data.autonomy.allow (a package named otherwise, say) denies every call,
// as an undefined allow does.
func (b *Bundle) Warnings() []string {
	var out []string
	if b.noAllow {
		out = append(out, "the policy defines no rule data.autonomy.allow (is its package autonomy?): every call is denied as policy: denied")
	}
	// Under the /v1/tool protocol a capability is not refused for its
	// name (bundles named kinds freely before there was a rule), but no
	// plan step can name one the rule refuses: it is never preflighted.
	if b.kinds == preflight.KindRuleTool {
		for _, k := range unnamable(b.governance, b.kinds) {
			out = append(out, fmt.Sprintf("capability %q does not follow the plan step kind rule %s: no preflight can name it", k, b.kinds.Pattern()))
		}
	}
	return out
}

// Unenforced describes, one line per clause in kind order, the clauses the
// bundle accepted and type-checked but that nothing evaluates: every
// clause of a validate: false contract. check-config prints these and serve
// logs them, so an operator never mistakes a declared clause for an
// enforced one.
func (b *Bundle) Unenforced() []string {
	kinds := make([]string, 0, len(b.governance.Capabilities))
	for kind, c := range b.governance.Capabilities {
		if c.Contract != nil {
			kinds = append(kinds, kind)
		}
	}
	sort.Strings(kinds)
	var out []string
	for _, kind := range kinds {
		if b.clauses.Enforced(kind) {
			continue
		}
		spec := b.governance.Capabilities[kind].Contract
		for _, l := range []struct {
			name  string
			exprs []string
		}{{clause.Preconditions, spec.Preconditions}, {clause.Invariants, spec.Invariants}, {clause.Postconditions, spec.Postconditions}} {
			for i := range l.exprs {
				out = append(out, fmt.Sprintf("capability %q: %s[%d] not enforced: the contract is validate: false (documentation only)", kind, l.name, i))
			}
		}
	}
	return out
}

var reasonRE = regexp.MustCompile(`[^a-z0-9_]+`)

// Allow evaluates data.autonomy.allow for input. It returns the deny reason
// ("policy: <deny_reason>" or "policy: denied") when the policy denies or
// leaves allow undefined. A non-boolean result, an evaluation error and a
// timeout are errors, which callers turn into a deny. The deny_reason is
// folded into the reason shape: lower case, runs of anything but [a-z0-9_]
// become "_".
func (b *Bundle) Allow(ctx context.Context, input map[string]any) (bool, string, error) {
	a, err := b.allowWith(ctx, rego.EvalInput(input))
	return a.allowed, a.reason, err
}

// allowWith evaluates the policy on input. The answer is settled when
// nothing in it failed: a deny whose deny_reason failed or timed out is
// answered "policy: denied" but not settled, so it is not kept (answers.go).
func (b *Bundle) allowWith(ctx context.Context, input rego.EvalOption) (answer, error) {
	ctx, cancel := context.WithTimeout(ctx, b.timeout)
	defer cancel()
	// OPA would start a goroutine per evaluation to watch ctx and cancel
	// the query; a callback registered on ctx does the same without one,
	// which saves a Check the wake-ups of that goroutine.
	halt := topdown.NewCancel()
	defer context.AfterFunc(ctx, halt.Cancel)()
	rs, err := b.allow.Eval(ctx, input, rego.EvalExternalCancel(halt))
	if err != nil {
		// OPA reports a timeout as the context's error or as whichever
		// builtin noticed it first (numbers.range: timed out …), as timing
		// falls; name the cause the same way every time.
		if cerr := ctx.Err(); cerr != nil && !strings.Contains(err.Error(), cerr.Error()) {
			err = fmt.Errorf("%w: %w", cerr, err)
		}
		return answer{}, fmt.Errorf("bundle: evaluate data.autonomy.allow: %w", err)
	}
	if len(rs) > 0 && len(rs[0].Expressions) > 0 {
		allowed, ok := rs[0].Expressions[0].Value.(bool)
		if !ok {
			return answer{}, ErrNotBoolean
		}
		if allowed {
			return answer{allowed: true, settled: true}, nil
		}
	}
	sub := ""
	rs, err = b.denyReason.Eval(ctx, input, rego.EvalExternalCancel(halt))
	if err == nil && len(rs) > 0 && len(rs[0].Expressions) > 0 {
		if s, ok := rs[0].Expressions[0].Value.(string); ok {
			sub = strings.Trim(reasonRE.ReplaceAllString(strings.ToLower(s), "_"), "_")
		}
	}
	return answer{reason: preflight.PolicyReason(sub), settled: err == nil}, nil
}

// maxProbeKinds bounds how many capabilities Decides probes, so that a
// policy that times out on every input holds a readiness probe for at
// most (maxProbeKinds+1) policy timeouts.
const maxProbeKinds = 8

// Decides reports whether the policy can decide calls: it evaluates
// data.autonomy.allow on probe inputs shaped as the gate builds them (a
// POST to gatePath of each of the first capabilities in sorted order with
// empty args, no actor and no preflight, and an ungated GET /) and returns
// nil once one of them evaluates without error, whatever it answers. A
// policy that fails on all of them (a complete rule given two values, a
// builtin error such as 1/0 under strict builtin errors, a non-boolean
// allow, a timeout) wraps ErrCannotDecide with the first failure: every
// call it meets is a 503, and readiness says so. A policy that fails only
// for some inputs still decides the others and is not reported.
func (b *Bundle) Decides(ctx context.Context, mode, gatePath string) error {
	kinds := make([]string, 0, len(b.governance.Capabilities))
	for k := range b.governance.Capabilities {
		kinds = append(kinds, k)
	}
	sort.Strings(kinds)
	kinds = kinds[:min(len(kinds), maxProbeKinds)]
	probe := func(method, path, kind string) error {
		_, _, err := b.Allow(ctx, map[string]any{
			"request":   map[string]any{"method": method, "path": path, "headers": map[string]any{}},
			"action":    map[string]any{"kind": kind, "args": map[string]any{}},
			"actor":     map[string]any{"id": ""},
			"mode":      mode,
			"preflight": nil,
		})
		return err
	}
	first := probe("GET", "/", "")
	if first == nil {
		return nil
	}
	for _, k := range kinds {
		if err := probe("POST", gatePath, k); err == nil {
			return nil
		}
	}
	return fmt.Errorf("%w: %w", ErrCannotDecide, first)
}
