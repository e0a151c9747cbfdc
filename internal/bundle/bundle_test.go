package bundle_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/contractrefine/autonomy/internal/bundle"
	"github.com/contractrefine/autonomy/internal/bundle/bundletest"
	"github.com/contractrefine/autonomy/preflight"
	"github.com/contractrefine/autonomy/preflight/clause"
)

const testPolicy = `package autonomy

import rego.v1

default allow := false

allow if data.autonomy.capabilities[input.action.kind]
`

// writeBundle writes policy.rego and data.yaml into a fresh directory.
func writeBundle(t *testing.T, data string) string {
	t.Helper()
	return bundletest.Dir(t, map[string]string{"policy.rego": testPolicy, "data.yaml": data})
}

func TestLoadRejectsMalformedClauses(t *testing.T) {
	dir := writeBundle(t, `autonomy:
  capabilities:
    account.withdraw:
      zones: ["*"]
      contract:
        preconditions: ["args.amount > 0", "args.amount <= args.account.balance &&"]
        invariants: ["args.account.balance + 1"]
    refund.create.v2:
      zones: ["payments"]
      contract:
        preconditions: ["isPositive(args.amountUsd)"]
        postconditions: ["result.ok == true", "old(args.amountUsd)"]
    tool.echo:
      zones: ["*"]
`)
	_, err := bundle.Load(context.Background(), dir, nil)
	if err == nil {
		t.Fatal("Load accepted a bundle with malformed clauses")
	}
	if !errors.Is(err, clause.ErrInvalidClause) {
		t.Errorf("error %v is not clause.ErrInvalidClause", err)
	}
	var ce *clause.CompileError
	if !errors.As(err, &ce) {
		t.Fatalf("error %T is not a *clause.CompileError: %v", err, err)
	}
	type where struct {
		Kind, Clause string
		Index        int
		Line, Column int
	}
	var got []where
	for _, p := range ce.Problems {
		got = append(got, where{p.Kind, p.Clause, p.Index, p.Line, p.Column})
	}
	want := []where{
		{"account.withdraw", clause.Preconditions, 1, 1, 39},
		{"account.withdraw", clause.Invariants, 0, 1, 1},
		{"refund.create.v2", clause.Preconditions, 0, 1, 11},
		{"refund.create.v2", clause.Postconditions, 1, 1, 1},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("problems %+v, want %+v", got, want)
	}
	msg := err.Error()
	prefix := "bundle " + dir + ": clause: 4 invalid clauses: "
	if !strings.HasPrefix(msg, prefix) {
		t.Errorf("error %q does not start with %q", msg, prefix)
	}
	for _, part := range []string{
		`capability "account.withdraw": preconditions[1] at 1:39: Syntax error: mismatched input '<EOF>'`,
		`capability "account.withdraw": invariants[0] at 1:1: clause must evaluate to bool, found int`,
		`capability "refund.create.v2": preconditions[0] at 1:11: undeclared reference to 'isPositive'`,
		`capability "refund.create.v2": postconditions[1] at 1:1: clause must evaluate to bool, found dyn (compare explicitly, e.g. == true)`,
	} {
		if !strings.Contains(msg, part) {
			t.Errorf("error lacks %q:\n%s", part, msg)
		}
	}
	if strings.Contains(msg, "tool.echo") || strings.Contains(msg, `"account.withdraw": preconditions[0]`) ||
		strings.Contains(msg, "postconditions[0]") {
		t.Errorf("error blames a good clause:\n%s", msg)
	}
}

func TestLoadDecodesCapabilities(t *testing.T) {
	b, err := bundle.Load(context.Background(), "", nil)
	if err != nil {
		t.Fatal(err)
	}
	gov := b.Governance()
	for _, kind := range []string{"tool.echo", "tool.sleep", "tool.shell", "customer.read.v3", "refund.create.v2"} {
		if _, ok := gov.Capability(kind); !ok {
			t.Errorf("embedded bundle lacks capability %s", kind)
		}
	}
	refund, _ := gov.Capability("refund.create.v2")
	want := preflight.Capability{
		Zones: []string{"payments"}, SideEffects: true, RequiresPreflight: true, RequiresRollback: true,
		Rollbacks: []string{"rb.refund.void"}, Evidence: []string{"receipt.id"}, BindArguments: true,
		Contract: &preflight.ContractSpec{Preconditions: []string{"args.amountUsd > 0"}},
	}
	if !reflect.DeepEqual(refund, want) {
		t.Errorf("refund.create.v2 = %+v, want %+v", refund, want)
	}
	set := b.ClauseSet()
	if !set.Enforced("refund.create.v2") || set.HasContract("tool.echo") {
		t.Errorf("clause set: refund enforced %v, echo has contract %v", set.Enforced("refund.create.v2"), set.HasContract("tool.echo"))
	}
	vs := b.Clauses().Check("refund.create.v2", map[string]any{"amountUsd": -5.0})
	if len(vs) != 1 || vs[0].Reason != preflight.ReasonPreconditionViolated || vs[0].Message != "precondition violated: args.amountUsd > 0 (args.amountUsd = -5)" {
		t.Errorf("Check(-5) = %+v", vs)
	}
	if vs := b.Clauses().Check("refund.create.v2", map[string]any{"amountUsd": 125.0}); len(vs) != 0 {
		t.Errorf("Check(125) = %+v, want no violations", vs)
	}
}

func TestLoadDecodesContractBlock(t *testing.T) {
	dir := writeBundle(t, `autonomy:
  capabilities:
    account.withdraw:
      zones: ["*"]
      contract:
        preconditions: ["args.amount > 0", "args.amount <= args.account.balance"]
        invariants: ["args.account.balance >= 0"]
        postconditions: ["result.balance == old(args.account.balance) - args.amount"]
        message: "insufficient funds"
        strict: false
        validate: true
`)
	b, err := bundle.Load(context.Background(), dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	c, _ := b.Governance().Capability("account.withdraw")
	f, tr := false, true
	want := &preflight.ContractSpec{
		Preconditions:  []string{"args.amount > 0", "args.amount <= args.account.balance"},
		Invariants:     []string{"args.account.balance >= 0"},
		Postconditions: []string{"result.balance == old(args.account.balance) - args.amount"},
		Message:        "insufficient funds", Strict: &f, Validate: &tr,
	}
	if !reflect.DeepEqual(c.Contract, want) {
		t.Errorf("contract = %+v, want %+v", c.Contract, want)
	}
	if n := b.ClauseSet().Len(); n != 4 {
		t.Errorf("compiled %d clauses, want 4", n)
	}
	vs := b.Clauses().Check("account.withdraw", map[string]any{"amount": 150.0, "account": map[string]any{"balance": 100.0}})
	if len(vs) != 1 || vs[0].Index != 1 || vs[0].Message != "insufficient funds: args.amount <= args.account.balance (args.amount = 150, args.account.balance = 100)" {
		t.Errorf("Check(overdraft) = %+v", vs)
	}
}

func TestLoadRejectsUnknownKeys(t *testing.T) {
	tests := map[string]struct {
		data string
		want string
	}{
		"unknown capability key": {
			data: "autonomy:\n  capabilities:\n    refund.create.v2:\n      zones: [\"payments\"]\n      bind_argument: true\n",
			want: `data: autonomy.capabilities["refund.create.v2"]: json: unknown field "bind_argument"`,
		},
		"unknown contract key": {
			data: "autonomy:\n  capabilities:\n    account.withdraw:\n      contract:\n        precondition: [\"args.amount > 0\"]\n",
			want: `data: autonomy.capabilities["account.withdraw"]: json: unknown field "precondition"`,
		},
		"a key in two cases": {
			data: "autonomy:\n  capabilities:\n    refund.create.v2:\n      zones: [\"payments\"]\n      Zones: [\"*\"]\n",
			want: `data: autonomy.capabilities["refund.create.v2"]: strictjson: /zones: member "zones" differs from "Zones" only in case`,
		},
		"unknown governance key": {
			data: "autonomy:\n  capability: {}\n",
			want: "data: autonomy.capability: unknown key (want capabilities, attestation)",
		},
		"clauses not a list": {
			data: "autonomy:\n  capabilities:\n    account.withdraw:\n      contract:\n        preconditions: \"args.amount > 0\"\n",
			want: `data: autonomy.capabilities["account.withdraw"]: json: cannot unmarshal string into Go struct field ContractSpec.contract.preconditions of type []string`,
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			dir := writeBundle(t, tc.data)
			_, err := bundle.Load(context.Background(), dir, nil)
			if err == nil {
				t.Fatal("Load accepted the bundle")
			}
			want := "bundle " + dir + ": " + tc.want
			if err.Error() != want {
				t.Errorf("error\n %s\nwant\n %s", err, want)
			}
		})
	}
}

func TestUnenforcedClausesAreListed(t *testing.T) {
	tests := map[string]struct {
		data string
		want []string
	}{
		"the embedded bundle enforces every clause": {},
		"postconditions and documentation-only contracts": {
			data: `autonomy:
  capabilities:
    account.withdraw:
      contract:
        preconditions: ["args.amount > 0"]
        postconditions: ["result.balance == old(args.account.balance) - args.amount", "result.ok == true"]
    account.audit:
      contract:
        preconditions: ["args.amount > 0"]
        invariants: ["args.account.balance >= 0"]
        postconditions: ["result.ok == true"]
        validate: false
    tool.echo: {}
`,
			want: []string{
				`capability "account.audit": preconditions[0] not enforced: the contract is validate: false (documentation only)`,
				`capability "account.audit": invariants[0] not enforced: the contract is validate: false (documentation only)`,
				`capability "account.audit": postconditions[0] not enforced: the contract is validate: false (documentation only)`,
			},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			dir := ""
			if tc.data != "" {
				dir = writeBundle(t, tc.data)
			}
			b, err := bundle.Load(context.Background(), dir, nil)
			if err != nil {
				t.Fatal(err)
			}
			if got := b.Unenforced(); !reflect.DeepEqual(got, tc.want) {
				t.Errorf("Unenforced() =\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(tc.want, "\n"))
			}
		})
	}
}

// TestDataSyntaxErrorsNameTheLine: a data file that does not parse is a
// load error naming the file and the line.
func TestDataSyntaxErrorsNameTheLine(t *testing.T) {
	for name, tc := range map[string]struct {
		file, data, want string
	}{
		"json":                    {"data.json", "{\n  \"autonomy\": {\n    \"capabilities\": {,}\n  }\n}\n", "data.json: line 3: invalid character ','"},
		"yaml":                    {"data.yaml", "autonomy:\n  capabilities:\n    a: [1, 2\n", "data.yaml: yaml: line"},
		"json in a sub directory": {"sub/data.json", "{\n\n  x\n}", "sub/data.json: line 3: invalid character 'x'"},
		// OPA's loader would read the first document alone.
		"yaml, second document": {"data.yaml", "autonomy:\n  capabilities: {}\n---\nautonomy:\n  capabilities: {x: {zones: [\"*\"]}}\n",
			"data.yaml: the file holds more than one YAML document"},
	} {
		t.Run(name, func(t *testing.T) {
			dir := bundletest.Dir(t, map[string]string{"policy.rego": testPolicy, tc.file: tc.data})
			_, err := bundle.Load(context.Background(), dir, nil)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Load: %v, want it to contain %q", err, tc.want)
			}
		})
	}
	// A data file in a hidden directory is not read, as OPA's loader skips it.
	dir := bundletest.Dir(t, map[string]string{"policy.rego": testPolicy, ".git/data.json": "{"})
	if _, err := bundle.Load(context.Background(), dir, nil); err != nil {
		t.Fatalf("Load with a broken data.json in .git: %v", err)
	}
}

// TestRevisionTellsBundlesApart: the revision digests each file's name and
// text with their lengths, so a file whose text ends in another file's
// name and text does not digest like the two files: the reload would take
// the change for "unchanged" and keep the old policy.
func TestRevisionTellsBundlesApart(t *testing.T) {
	const head, other = "package autonomy\ndefault allow := false\n#", "package other\nallow := true\n"
	two := bundletest.Load(t, map[string]string{"a.rego": head, "b.rego": other}, nil)
	one := bundletest.Load(t, map[string]string{"a.rego": head + "b.rego" + other}, nil)
	if two.Revision() == one.Revision() {
		t.Fatalf("two different bundles share revision %s", one.Revision())
	}
}

// TestLoadFollowsLinkedDirectories: a bundle directory that links in a
// subdirectory (a shared blocklist, or a ConfigMap item kept in a
// subdirectory behind ..data) is read through the link, as OPA's loader
// reads it: its data decides, and its broken Rego is an error. A link
// loop is an error, not a bundle without the looped part.
func TestLoadFollowsLinkedDirectories(t *testing.T) {
	const policy = "package autonomy\n\nimport rego.v1\n\ndefault allow := false\n\nallow if not data.blocklist.kinds[input.action.kind]\n"
	dir := bundletest.Dir(t, map[string]string{"bundle/policy.rego": policy, "ext/blk/data.json": `{"kinds":{"tool.echo":true}}`})
	root := filepath.Join(dir, "bundle")
	if err := os.Symlink(filepath.Join(dir, "ext", "blk"), filepath.Join(root, "blocklist")); err != nil {
		t.Fatal(err)
	}
	b, err := bundle.Load(context.Background(), root, nil)
	if err != nil {
		t.Fatal(err)
	}
	for kind, want := range map[string]bool{"tool.echo": false, "tool.other": true} {
		got, _, err := b.Allow(context.Background(), map[string]any{"action": map[string]any{"kind": kind}})
		if err != nil || got != want {
			t.Errorf("allow %s = %v, %v; want %v (the linked blocklist read)", kind, got, err, want)
		}
	}

	if err := os.WriteFile(filepath.Join(dir, "ext", "blk", "broken.rego"), []byte("package autonomy\nallow if {\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := bundle.Load(context.Background(), root, nil); err == nil || !strings.Contains(err.Error(), "broken.rego") {
		t.Errorf("Load with broken Rego behind the link: %v, want an error naming broken.rego", err)
	}
	if err := os.Remove(filepath.Join(dir, "ext", "blk", "broken.rego")); err != nil {
		t.Fatal(err)
	}

	if err := os.Symlink("..", filepath.Join(dir, "ext", "blk", "loop")); err != nil {
		t.Fatal(err)
	}
	if _, err := bundle.Load(context.Background(), root, nil); err == nil {
		t.Error("Load of a bundle with a link loop succeeded")
	}
}

// TestLoadDepthBoundsOnlyWhatIsRead: the bound on nesting (against link
// loops) applies to directories the loader reads, not to a file or a
// hidden directory it skips at that depth.
func TestLoadDepthBoundsOnlyWhatIsRead(t *testing.T) {
	deep := strings.Repeat("d/", bundle.MaxDepth)
	for _, extra := range []string{deep + "README.md", deep + ".git/x"} {
		dir := bundletest.Dir(t, map[string]string{"policy.rego": testPolicy, extra: "x"})
		if _, err := bundle.Load(context.Background(), dir, nil); err != nil {
			t.Errorf("Load with %s: %v", extra, err)
		}
	}
	dir := bundletest.Dir(t, map[string]string{"policy.rego": testPolicy, deep + "d/data.json": "{}"})
	if _, err := bundle.Load(context.Background(), dir, nil); err == nil || !strings.Contains(err.Error(), "nested deeper") {
		t.Errorf("Load with data %d directories down: %v, want the nesting error", bundle.MaxDepth+1, err)
	}
}

// TestDirs: the directories to watch are the ones Load reads: through a
// link to a directory, not into a hidden one; a dangling link (which Load
// refuses) is passed over, so the rest is still watched.
func TestDirs(t *testing.T) {
	dir := bundletest.Dir(t, map[string]string{"b/policy.rego": testPolicy, "b/sub/x.rego": testPolicy,
		"b/.git/y": "", "ext/data.json": "{}"})
	root := filepath.Join(dir, "b")
	for link, target := range map[string]string{"linked": filepath.Join(dir, "ext"), "dangling": filepath.Join(dir, "gone")} {
		if err := os.Symlink(target, filepath.Join(root, link)); err != nil {
			t.Fatal(err)
		}
	}
	got, err := bundle.Dirs(root)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{root, filepath.Join(root, "linked"), filepath.Join(root, "sub")}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("Dirs = %v, want %v", got, want)
	}
}

// TestMCPKindRule: under gate.protocol mcp a capability must be nameable
// by a tools/call; under the tool rule names are not checked.
func TestMCPKindRule(t *testing.T) {
	for name, tc := range map[string]struct {
		data    string
		rule    preflight.KindRule
		wantErr string
	}{
		"mcp names":       {data: "autonomy:\n  capabilities:\n    GetWeather: {}\n    refund.create.v2: {}\n", rule: preflight.KindRuleMCP},
		"space in a name": {data: "autonomy:\n  capabilities:\n    \"get weather\": {}\n", rule: preflight.KindRuleMCP, wantErr: `autonomy.capabilities["get weather"]: not an MCP tool name`},
		"tool rule":       {data: "autonomy:\n  capabilities:\n    \"get weather\": {}\n", rule: preflight.KindRuleTool},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := bundle.Load(context.Background(), writeBundle(t, tc.data), &bundle.Options{Kinds: tc.rule})
			if (err == nil) != (tc.wantErr == "") || (err != nil && !strings.Contains(err.Error(), tc.wantErr)) {
				t.Fatalf("err %v, want %q", err, tc.wantErr)
			}
		})
	}
}

// TestRevisionDigestsLoadedData: as docs/OPERATIONS.md says, the revision
// digests the Rego files as written and the data as loaded, so a comment in
// data.yaml or the same data in data.json keeps it, while a comment in a
// .rego file or another data value makes a new one.
func TestRevisionDigestsLoadedData(t *testing.T) {
	const policy = "package autonomy\n\ndefault allow := false\n"
	const data = "autonomy:\n  capabilities:\n    tool.echo: { zones: [\"*\"] }\n"
	base := bundletest.Load(t, map[string]string{"policy.rego": policy, "data.yaml": data}, nil).Revision()
	for name, files := range map[string]map[string]string{
		"comment in data.yaml": {"policy.rego": policy, "data.yaml": "# a comment\n" + data},
		"data.json instead":    {"policy.rego": policy, "data.json": `{"autonomy":{"capabilities":{"tool.echo":{"zones":["*"]}}}}`},
	} {
		if got := bundletest.Load(t, files, nil).Revision(); got != base {
			t.Errorf("%s: revision %s, want %s (the same data loaded)", name, got, base)
		}
	}
	for name, files := range map[string]map[string]string{
		"comment in policy.rego": {"policy.rego": policy + "# a comment\n", "data.yaml": data},
		"another zone":           {"policy.rego": policy, "data.yaml": "autonomy:\n  capabilities:\n    tool.echo: { zones: [\"payments\"] }\n"},
	} {
		if got := bundletest.Load(t, files, nil).Revision(); got == base {
			t.Errorf("%s: revision %s unchanged, want a new one", name, got)
		}
	}
}

// TestWarnsOfAPolicyWithoutAllow: a policy that defines no
// data.autonomy.allow loads (an undefined allow denies), and the bundle
// says so; one that defines it, even only as a default, does not.
func TestWarnsOfAPolicyWithoutAllow(t *testing.T) {
	data := "autonomy:\n  capabilities:\n    tool.echo: { zones: [\"*\"] }\n"
	tests := map[string]struct {
		policy string
		warned bool
	}{
		"another package": {"package other\n\nallow := true\n", true},
		"no allow rule":   {"package autonomy\n\ndeny_reason := \"closed\"\n", true},
		"a default allow": {"package autonomy\n\ndefault allow := false\n", false},
		"an allow rule":   {"package autonomy\n\nimport rego.v1\n\nallow if input.action.kind == \"tool.echo\"\n", false},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			b, err := bundle.Load(context.Background(), bundletest.Dir(t, map[string]string{"policy.rego": tc.policy, "data.yaml": data}), nil)
			if err != nil {
				t.Fatal(err)
			}
			if got := b.Warnings(); (len(got) > 0) != tc.warned {
				t.Fatalf("warnings %q, want some: %v", got, tc.warned)
			}
		})
	}
	def, err := bundle.Load(context.Background(), "", nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := def.Warnings(); len(got) != 0 {
		t.Fatalf("the embedded default bundle warns: %q", got)
	}
}

// TestEmbeddedRevisionIsTheFilesRevision: the embedded default bundle and
// the same files loaded from the repository's directory have one revision,
// so an operator running the default bundle from disk sees the revision
// the frames of the embedded one carry.
func TestEmbeddedRevisionIsTheFilesRevision(t *testing.T) {
	ctx := context.Background()
	embedded, err := bundle.Load(ctx, "", nil)
	if err != nil {
		t.Fatal(err)
	}
	disk, err := bundle.Load(ctx, "default", nil)
	if err != nil {
		t.Fatal(err)
	}
	if embedded.Revision() != disk.Revision() {
		t.Fatalf("embedded revision %s, the same files from disk %s", embedded.Revision(), disk.Revision())
	}
}
