package preflight

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// specReasons are the fixed reasons the specification names (its contract
// catalog, outcome composition, fail-closed rule, binding ladder, policy,
// clauses, tool outcomes and approvals), written out here.
var specReasons = []string{
	"contract: passed", "contract: repair_required", "contract: repair_exhausted",
	"contract: session_metadata_missing", "contract: verifier_unavailable",
	"contract: resolver_error", "contract: introspector_error",
	"contract: preflight_required", "contract: preflight_binding_mismatch",
	"contract: preflight_expired", "contract: preflight_replay",
	"contract: plan_shape_invalid", "contract: argument_provenance_invalid",
	"contract: capability_not_in_zone", "contract: rollback_contract_not_ready",
	"contract: expected_evidence_missing", "contract: attestation_stale",
	"contract: decision_chain_incomplete", "contract: chain_unverifiable_offline",
	"policy: denied",
	"clause: precondition_violated", "clause: invariant_violated", "clause: postcondition_violated",
	"outcome: output_contract_violated",
	"approval: pending", "approval: rejected",
}

// serviceReasons are the catalog's reasons the specification leaves to the
// service: docs/API.md documents each (the gateway's in docs/DEPLOY.md).
var serviceReasons = []string{
	"policy: allowed",
	"outcome: ok", "outcome: unverified",
	"gate: malformed_tool_call", "gate: partial_body",
	"gateway: upstream_unavailable", "gateway: escaped_slash", "gateway: upgrade_refused",
	"gateway: request_too_large", "gateway: body_unreadable",
}

// specCodes are the error codes the specification names for the HTTP API
// and the approvals API.
var specCodes = []string{
	"malformed-request", "contract-validation-failed", "unsupported-contract-version",
	"deadline-exceeded", "idempotency-key-reused", "idempotency-in-progress",
	"request-too-large", "preflight-disabled", "verifier-unavailable", "not-found",
	"approver-not-authorized", "approval-already-decided", "approver-is-actor", "approval-expired",
}

// serviceCodes are the catalog's codes the specification leaves to the
// service: docs/API.md documents each (the gateway's in docs/DEPLOY.md).
var serviceCodes = []string{
	"unsupported-media-type", "unauthorized", "remote-reads-forbidden", "method-not-allowed",
	"overloaded",
	"reporter-not-authorized", "outcome-already-reported", "outcome-mismatch",
	"upstream-unavailable", "path-rejected", "upgrade-refused", "body-unreadable",
}

func sameSet(t *testing.T, what string, got, want []string) {
	t.Helper()
	seen := map[string]bool{}
	for _, v := range got {
		if seen[v] {
			t.Errorf("%s: %q is listed twice", what, v)
		}
		seen[v] = true
		if !slices.Contains(want, v) {
			t.Errorf("%s: %q is in the catalog but not in the specification's list nor the service's", what, v)
		}
	}
	for _, v := range want {
		if !seen[v] {
			t.Errorf("%s: %q is missing from the catalog", what, v)
		}
	}
}

func TestReasonCatalogMatchesSpec(t *testing.T) {
	sameSet(t, "Reasons", Reasons(), append(slices.Clone(specReasons), serviceReasons...))
	for _, r := range Reasons() {
		if !ValidReason(r) {
			t.Errorf("reason %q does not have the <layer>: <subreason> shape", r)
		}
	}
	if got := PolicyReason("over_limit"); got != "policy: over_limit" || !ValidReason(got) {
		t.Errorf("PolicyReason(over_limit) = %q", got)
	}
	if got := PolicyReason(""); got != ReasonPolicyDenied {
		t.Errorf("PolicyReason(\"\") = %q, want %q", got, ReasonPolicyDenied)
	}
}

func TestCodeCatalogMatchesSpec(t *testing.T) {
	sameSet(t, "Codes", Codes(), append(slices.Clone(specCodes), serviceCodes...))
}

// source is one parsed non-test Go file of the module.
type source struct {
	rel  string // slash path from the module root
	file *ast.File
}

// moduleSources parses every non-test Go file of the module, testdata
// excluded.
func moduleSources(t *testing.T) []source {
	t.Helper()
	_, out := parseModule(t, false, 0)
	return out
}

// parseModule parses the module's Go files, testdata excluded: the non-test
// ones, and the tests too when withTests, with mode added to
// parser.SkipObjectResolution.
func parseModule(t *testing.T, withTests bool, mode parser.Mode) (*token.FileSet, []source) {
	t.Helper()
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	var out []source
	fset := token.NewFileSet()
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if name := d.Name(); name == "testdata" || strings.HasPrefix(name, ".") && path != root {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || !withTests && strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, mode|parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		out = append(out, source{filepath.ToSlash(rel), f})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(out) < 50 {
		t.Fatalf("found %d Go files under %s; is the test run from the module?", len(out), root)
	}
	return fset, out
}

// stringLits calls fn with each string literal of f.
func stringLits(f *ast.File, fn func(s string, pos token.Pos)) {
	ast.Inspect(f, func(n ast.Node) bool {
		if lit, ok := n.(*ast.BasicLit); ok && lit.Kind == token.STRING {
			if s, err := strconv.Unquote(lit.Value); err == nil {
				fn(s, lit.Pos())
			}
		}
		return true
	})
}

var reasonLiteral = regexp.MustCompile(`^(contract|approval|clause|outcome|policy|gate|gateway): [a-z0-9_]+$`)

// TestReasonsOnlyInCatalog fails on a reason written as a literal outside
// reasons.go: every package names the catalog's constant instead.
func TestReasonsOnlyInCatalog(t *testing.T) {
	for _, src := range moduleSources(t) {
		if src.rel == "preflight/reasons.go" {
			continue
		}
		stringLits(src.file, func(s string, _ token.Pos) {
			if reasonLiteral.MatchString(s) {
				t.Errorf("%s: reason %q written as a literal; use the preflight.Reason constant", src.rel, s)
			}
		})
	}
}

// codeOwners may spell codes of their own: the tool runtime is a separate
// service, and the envelope's two codes are the catalog's through
// CodeValidationFailed and CodeUnsupportedVersion.
var codeOwners = []string{"preflight/codes.go", "preflight/envelope/", "internal/toolruntime/", "cmd/toolruntime/"}

func ownsCodes(rel string) bool {
	return slices.ContainsFunc(codeOwners, func(o string) bool { return strings.HasPrefix(rel, o) })
}

// TestCodesUsedAndOnlyInCatalog fails on a catalog code no package
// answers with, on a code constant declared outside the catalog, and on a
// catalog code written as a literal elsewhere.
func TestCodesUsedAndOnlyInCatalog(t *testing.T) {
	codes := Codes()
	names := map[string]bool{} // constant names declared in codes.go
	used := map[string]bool{}
	for _, src := range moduleSources(t) {
		dir := filepath.ToSlash(filepath.Dir(src.rel))
		inPreflight := dir == "preflight" || dir == "preflight/envelope"
		if src.rel == "preflight/codes.go" {
			for _, d := range src.file.Decls {
				if g, ok := d.(*ast.GenDecl); ok && g.Tok == token.CONST {
					for _, spec := range g.Specs {
						for _, n := range spec.(*ast.ValueSpec).Names {
							if strings.HasPrefix(n.Name, "Code") {
								names[n.Name] = true
							}
						}
					}
				}
			}
			continue
		}
		if !ownsCodes(src.rel) {
			stringLits(src.file, func(s string, _ token.Pos) {
				if slices.Contains(codes, s) {
					t.Errorf("%s: code %q written as a literal; use the preflight.Code constant", src.rel, s)
				}
			})
		}
		ast.Inspect(src.file, func(n ast.Node) bool {
			switch n := n.(type) {
			case *ast.SelectorExpr:
				// The envelope answers with its two codes itself.
				if x, ok := n.X.(*ast.Ident); ok && (x.Name == "preflight" || x.Name == "envelope") {
					used[n.Sel.Name] = true
				}
			case *ast.Ident:
				if inPreflight {
					used[n.Name] = true
				}
			case *ast.ValueSpec:
				for _, name := range n.Names {
					if strings.HasPrefix(name.Name, "Code") && !ownsCodes(src.rel) {
						t.Errorf("%s: code constant %s declared outside preflight/codes.go", src.rel, name.Name)
					}
				}
			}
			return true
		})
	}
	if len(names) != len(codes) {
		t.Errorf("codes.go declares %d Code constants, Codes() lists %d", len(names), len(codes))
	}
	for name := range names {
		if !used[name] {
			t.Errorf("preflight.%s is declared but no package answers with it", name)
		}
	}
}

// outsideRefs are citations of documents the repository does not hold.
var outsideRefs = regexp.MustCompile(`SPEC §|\bINV-CR-\d|\bseed 0\d\d`)

// TestCommentsCiteTheRepo fails on a Go comment that cites the
// specification's sections, its invariants or its seed documents: comments
// name a document in the repository (README.md, docs/) or say the rule.
func TestCommentsCiteTheRepo(t *testing.T) {
	fset, sources := parseModule(t, true, parser.ParseComments)
	for _, src := range sources {
		for _, g := range src.file.Comments {
			if m := outsideRefs.FindString(g.Text()); m != "" {
				t.Errorf("%s: comment cites %q, a document outside the repository", fset.Position(g.Pos()), m)
			}
		}
	}
}
