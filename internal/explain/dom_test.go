package explain_test

import (
	"io"
	"slices"
	"strings"
	"testing"

	"golang.org/x/net/html"
)

// parseHTML parses a page; the assertions below walk the tree.
func parseHTML(t *testing.T, r io.Reader) *html.Node {
	t.Helper()
	doc, err := html.Parse(r)
	if err != nil {
		t.Fatalf("parse html: %v", err)
	}
	return doc
}

// all returns the elements under n, in document order, that match.
func all(n *html.Node, match func(*html.Node) bool) []*html.Node {
	var out []*html.Node
	for d := range n.Descendants() {
		if d.Type == html.ElementNode && match(d) {
			out = append(out, d)
		}
	}
	return out
}

// tagClass matches elements of tag carrying every one of classes.
func tagClass(tag string, classes ...string) func(*html.Node) bool {
	return func(n *html.Node) bool {
		if n.Data != tag {
			return false
		}
		have := strings.Fields(attr(n, "class"))
		for _, c := range classes {
			if !slices.Contains(have, c) {
				return false
			}
		}
		return true
	}
}

func byID(doc *html.Node, id string) *html.Node {
	found := all(doc, func(n *html.Node) bool { return attr(n, "id") == id })
	if len(found) == 0 {
		return nil
	}
	return found[0]
}

func attr(n *html.Node, name string) string {
	for _, a := range n.Attr {
		if a.Key == name {
			return a.Val
		}
	}
	return ""
}

// text is the node's text content with runs of white space collapsed.
func text(n *html.Node) string {
	if n == nil {
		return ""
	}
	var b strings.Builder
	for d := range n.Descendants() {
		if d.Type == html.TextNode {
			b.WriteString(d.Data)
		}
	}
	return strings.Join(strings.Fields(b.String()), " ")
}

// assertSelfContained checks the page runs no script and loads nothing
// from elsewhere: no <script>, no event handler attributes, no src or
// stylesheet link, and no href leaving the page.
func assertSelfContained(t *testing.T, doc *html.Node) {
	t.Helper()
	for _, n := range all(doc, func(*html.Node) bool { return true }) {
		if n.Data == "script" || n.Data == "link" || n.Data == "iframe" || n.Data == "img" {
			t.Errorf("page has a <%s> element", n.Data)
		}
		for _, a := range n.Attr {
			if strings.HasPrefix(a.Key, "on") || a.Key == "src" {
				t.Errorf("<%s> has attribute %s=%q", n.Data, a.Key, a.Val)
			}
			if a.Key == "href" && !strings.HasPrefix(a.Val, "#") && !strings.HasPrefix(a.Val, "/") {
				t.Errorf("<%s> links out: %q", n.Data, a.Val)
			}
		}
	}
}
