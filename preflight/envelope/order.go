package envelope

import (
	"cmp"
	"slices"
	"strings"
)

// order keeps one error per path and sorts them in document order (see
// doc.go). Positions are found by reading raw a second time: only a failing
// envelope pays for them.
func order(raw []byte, errs []located) []FieldError {
	errs = onePerPath(errs)
	var spans map[string]span
	for i := range errs {
		if errs[i].offset >= 0 {
			continue
		}
		if spans == nil {
			spans = make(map[string]span)
			// raw was decoded once already, so this cannot fail; should it,
			// every error sorts at the start and none is lost.
			_, _, _ = decode(raw, spans)
		}
		errs[i].offset = place(errs[i], spans)
		if errs[i].missing && errs[i].depth == 1 {
			// Several fields missing after the same present one follow
			// the seed's table among themselves.
			errs[i].seq = slices.Index(fieldOrder, strings.TrimPrefix(errs[i].Path, "/"))
		}
	}
	slices.SortStableFunc(errs, func(a, b located) int {
		return cmp.Or(
			cmp.Compare(a.offset, b.offset),
			cmp.Compare(b.depth, a.depth), // at a shared offset, the inner error first
			cmp.Compare(a.seq, b.seq),
		)
	})
	out := make([]FieldError, len(errs))
	for i, e := range errs {
		out[i] = e.FieldError
	}
	return out
}

// onePerPath keeps, for each path, the error of lowest rank, and the first
// of equal rank: one fault, one message.
func onePerPath(errs []located) []located {
	kept := make([]located, 0, len(errs))
	at := make(map[string]int, len(errs))
	for _, e := range errs {
		i, seen := at[e.Path]
		switch {
		case !seen:
			at[e.Path] = len(kept)
			kept = append(kept, e)
		case e.rank < kept[i].rank:
			kept[i] = e
		}
	}
	return kept
}

// place finds the sort offset of an error. A present value sorts at its
// start. A missing nested member sorts at the end of its object, after
// everything present in it. A missing top-level field sorts at the end of
// the nearest field that precedes it in the seed's table and is present,
// or before everything when there is none.
func place(e located, spans map[string]span) int64 {
	if !e.missing {
		return startOf(e.Path, spans)
	}
	parent := parentOf(e.Path)
	if parent != "" {
		if sp, ok := spans[parent]; ok {
			return sp.end
		}
		return startOf(parent, spans)
	}
	idx := slices.Index(fieldOrder, strings.TrimPrefix(e.Path, "/"))
	for j := idx - 1; j >= 0; j-- {
		if sp, ok := spans["/"+fieldOrder[j]]; ok {
			return sp.end
		}
	}
	return 0
}

// startOf is the start of the value at path, or of its nearest recorded
// ancestor when the value lies deeper than positions are kept.
func startOf(path string, spans map[string]span) int64 {
	for {
		if sp, ok := spans[path]; ok {
			return sp.start
		}
		if path == "" {
			return 0
		}
		path = parentOf(path)
	}
}

// parentOf drops the last reference token of a JSON Pointer.
func parentOf(path string) string {
	if i := strings.LastIndexByte(path, '/'); i >= 0 {
		return path[:i]
	}
	return ""
}
