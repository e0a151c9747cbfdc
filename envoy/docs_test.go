package envoy

import (
	"bytes"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"

	jwtv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/jwt_authn/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	"google.golang.org/protobuf/encoding/protojson"
	"gopkg.in/yaml.v3"
)

// TestDeployDocJWTSnippet validates the jwt_authn filter that
// docs/DEPLOY.md tells operators to paste in front of ext_authz, so the
// advice on identity headers cannot rot into a config Envoy rejects.
func TestDeployDocJWTSnippet(t *testing.T) {
	doc := readFile(t, filepath.Join(repoRoot, "docs", "DEPLOY.md"))
	snippet := fencedBlockAfter(t, doc, "<!-- jwt_authn snippet")

	var filters []any
	if err := yaml.Unmarshal(snippet, &filters); err != nil || len(filters) != 1 {
		t.Fatalf("snippet is not a one-filter YAML list: %v", err)
	}
	jsonText, err := json.Marshal(filters[0])
	if err != nil {
		t.Fatal(err)
	}
	var f hcmv3.HttpFilter
	if err := protojson.Unmarshal(jsonText, &f); err != nil {
		t.Fatalf("snippet does not decode as an HTTP filter: %v", err)
	}
	if err := validateDeep(&f); err != nil {
		t.Fatalf("snippet does not validate: %v", err)
	}
	var jwt jwtv3.JwtAuthentication
	mustUnpack(t, f.GetTypedConfig(), &jwt)
	var headers []string
	for _, p := range jwt.GetProviders() {
		for _, c := range p.GetClaimToHeaders() {
			headers = append(headers, c.GetHeaderName())
		}
	}
	if len(headers) != 1 || headers[0] != actorHeader {
		t.Errorf("snippet copies claims to %v, want %s only", headers, actorHeader)
	}
}

// fencedBlockAfter returns the body of the first ``` block after the line
// holding marker, with the block's own indentation removed.
func fencedBlockAfter(t *testing.T, doc []byte, marker string) []byte {
	t.Helper()
	_, rest, ok := bytes.Cut(doc, []byte(marker))
	if !ok {
		t.Fatalf("no %q marker", marker)
	}
	var out bytes.Buffer
	var indent string
	inside := false
	for line := range strings.Lines(string(rest)) {
		trimmed := strings.TrimSpace(line)
		if strings.HasPrefix(trimmed, "```") {
			if inside {
				return out.Bytes()
			}
			inside = true
			indent = line[:strings.Index(line, "```")]
			continue
		}
		if inside {
			out.WriteString(strings.TrimPrefix(line, indent))
		}
	}
	t.Fatalf("no closed code block after %q", marker)
	return nil
}
