package canon

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync"
	"unicode/utf16"
	"unicode/utf8"
)

var (
	// ErrInvalidUTF8 reports a string that is not valid UTF-8.
	ErrInvalidUTF8 = errors.New("canon: string is not valid UTF-8")
	// ErrNumber reports a number that has no JSON form (NaN, ±Inf) or does not parse.
	ErrNumber = errors.New("canon: number cannot be written as JSON")
	// ErrInexact reports a number whose text names another value than the
	// double canonical JSON writes for it: an integer beyond 2^53 that is
	// not a double (9007199254740993), or more digits than a double holds
	// (1.0000000000000001). Two such texts can share one canonical form.
	ErrInexact = errors.New("canon: number does not round-trip through a double")
)

// Marshal returns the canonical JSON form of v. A []byte or json.RawMessage
// is taken to be JSON text and is parsed first; any other value is encoded
// with encoding/json and then put in canonical form.
func Marshal(v any) ([]byte, error) {
	var out []byte
	err := canonical(v, func(b []byte) { out = bytes.Clone(b) })
	return out, err
}

// bufs holds the buffers canonical writes into: a preflight's frame attrs
// are several KB, and a fresh buffer grew to them by doubling, which was a
// fifth of the bytes a preflight allocated (docs/PERFORMANCE.md).
var bufs = sync.Pool{New: func() any { return new(bytes.Buffer) }}

// maxPooled is the largest buffer put back in bufs; a rare huge value
// does not stay held.
const maxPooled = 64 << 10

// canonical writes the canonical form of v (as Marshal takes it) into a
// pooled buffer and hands its bytes to use, which must not keep them.
func canonical(v any, use func([]byte)) error {
	var raw []byte
	parse := true
	switch t := v.(type) {
	case json.RawMessage:
		raw = t
	case []byte:
		raw = t
	default:
		if parse = !isPlain(v); parse {
			b, err := json.Marshal(v)
			if err != nil {
				return fmt.Errorf("canon: encode: %w", err)
			}
			raw = b
		}
	}
	buf := bufs.Get().(*bytes.Buffer)
	buf.Reset()
	defer func() {
		if buf.Cap() <= maxPooled {
			bufs.Put(buf)
		}
	}()
	if parse {
		if writeText(buf, raw) {
			use(buf.Bytes())
			return nil
		}
		// Text writeText does not take is parsed, which decides.
		buf.Reset()
		parsed, err := parseJSON(raw)
		if err != nil {
			return err
		}
		v = parsed
	}
	if err := write(buf, v); err != nil {
		return err
	}
	use(buf.Bytes())
	return nil
}

// Parse decodes JSON text into the generic values Marshal writes directly:
// map[string]any, []any, string, bool, nil and json.Number. Trailing data
// is an error.
func Parse(raw []byte) (any, error) {
	if v, ok := parseText(raw); ok {
		return v, nil
	}
	return parseJSON(raw)
}

// parseJSON is Parse through encoding/json, which decides for the text
// parseText does not take.
func parseJSON(raw []byte) (any, error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, fmt.Errorf("canon: parse: %w", err)
	}
	if _, err := dec.Token(); err == nil {
		return nil, errors.New("canon: parse: trailing data after JSON value")
	}
	return v, nil
}

// Digest returns "sha256:<hex>" of the canonical form of v.
func Digest(v any) (string, error) {
	var d string
	err := canonical(v, func(b []byte) { d = DigestBytes(b) })
	return d, err
}

// DigestBytes returns "sha256:<hex>" of b, which the caller has already put
// in canonical form.
func DigestBytes(b []byte) string {
	sum := sha256.Sum256(b)
	// Written in place: one allocation, where the prefix joined to
	// hex.EncodeToString's string took two.
	const prefix = "sha256:"
	var text [len(prefix) + 2*sha256.Size]byte
	copy(text[:], prefix)
	hex.Encode(text[len(prefix):], sum[:])
	return string(text[:])
}

// Canonical is JSON text already in canonical form (what Marshal wrote): it
// is written as it is, not parsed and written again. The caller vouches for
// the form; the WAL uses it to embed a preflight decision, canonical since
// it was made, in its frame's attrs.
type Canonical []byte

// isPlain reports whether v is made only of the generic JSON values, so it
// can be written without a round trip through encoding/json.
func isPlain(v any) bool {
	switch t := v.(type) {
	case nil, bool, string, json.Number, float64, int, int64, Canonical:
		return true
	case map[string]any:
		for _, e := range t {
			if !isPlain(e) {
				return false
			}
		}
		return true
	case []any:
		for _, e := range t {
			if !isPlain(e) {
				return false
			}
		}
		return true
	}
	return false
}

func write(buf *bytes.Buffer, v any) error {
	switch t := v.(type) {
	case nil:
		buf.WriteString("null")
	case Canonical:
		buf.Write(t)
	case bool:
		if t {
			buf.WriteString("true")
		} else {
			buf.WriteString("false")
		}
	case string:
		return writeString(buf, t)
	case json.Number:
		f, err := Number(t)
		if err != nil {
			return err
		}
		return writeNumber(buf, f)
	case float64:
		return writeNumber(buf, t)
	case int:
		return writeNumber(buf, float64(t))
	case int64:
		return writeNumber(buf, float64(t))
	case []any:
		buf.WriteByte('[')
		for i, e := range t {
			if i > 0 {
				buf.WriteByte(',')
			}
			if err := write(buf, e); err != nil {
				return err
			}
		}
		buf.WriteByte(']')
	case map[string]any:
		keys := make([]string, 0, len(t))
		for k := range t {
			keys = append(keys, k)
		}
		sortUTF16(keys)
		buf.WriteByte('{')
		for i, k := range keys {
			if i > 0 {
				buf.WriteByte(',')
			}
			if err := writeString(buf, k); err != nil {
				return err
			}
			buf.WriteByte(':')
			if err := write(buf, t[k]); err != nil {
				return err
			}
		}
		buf.WriteByte('}')
	default:
		return fmt.Errorf("canon: unsupported type %T", v)
	}
	return nil
}

// sortUTF16 orders names by their UTF-16 code units, as RFC 8785 requires.
func sortUTF16(keys []string) { slices.SortFunc(keys, compareUTF16[string]) }

// compareUTF16 compares two names by their UTF-16 code units. Byte order
// agrees with it except where a supplementary-plane character meets one in
// U+E000..U+FFFF, so the slower comparison runs only then.
func compareUTF16[S ~string | ~[]byte](a, b S) int {
	if isBMPOnly(a) && isBMPOnly(b) {
		for i := 0; i < len(a) && i < len(b); i++ {
			if a[i] != b[i] {
				return int(a[i]) - int(b[i])
			}
		}
		return len(a) - len(b)
	}
	ua, ub := utf16.Encode([]rune(string(a))), utf16.Encode([]rune(string(b)))
	for k := 0; k < len(ua) && k < len(ub); k++ {
		if ua[k] != ub[k] {
			return int(ua[k]) - int(ub[k])
		}
	}
	return len(ua) - len(ub)
}

func isBMPOnly[S ~string | ~[]byte](s S) bool {
	for i := 0; i < len(s); i++ {
		if s[i] >= 0xF0 {
			return false
		}
	}
	return true
}

const hexDigits = "0123456789abcdef"

// WriteString writes s as a canonical JSON string (RFC 8785 §3.2.2.2), for
// callers that write a known object shape by hand instead of building a map
// for Marshal. It returns ErrInvalidUTF8, having written nothing, when s is
// not valid UTF-8.
func WriteString(buf *bytes.Buffer, s string) error {
	return writeString(buf, s)
}

// WriteValue writes v in canonical form, as Marshal would, for a value made
// only of the generic JSON values (map[string]any, []any, string, bool, nil,
// json.Number, float64, int, int64). Anything else is an error.
func WriteValue(buf *bytes.Buffer, v any) error {
	if !isPlain(v) {
		return fmt.Errorf("canon: unsupported type %T", v)
	}
	return write(buf, v)
}

func writeString(buf *bytes.Buffer, s string) error {
	if !utf8.ValidString(s) {
		return ErrInvalidUTF8
	}
	buf.WriteByte('"')
	// Bytes written as they are go in runs, not one WriteByte each.
	start := 0
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c >= 0x20 && c != '"' && c != '\\' {
			continue
		}
		buf.WriteString(s[start:i])
		start = i + 1
		switch {
		case c == '"':
			buf.WriteString(`\"`)
		case c == '\\':
			buf.WriteString(`\\`)
		case c == '\b':
			buf.WriteString(`\b`)
		case c == '\t':
			buf.WriteString(`\t`)
		case c == '\n':
			buf.WriteString(`\n`)
		case c == '\f':
			buf.WriteString(`\f`)
		case c == '\r':
			buf.WriteString(`\r`)
		default:
			buf.WriteString(`\u00`)
			buf.WriteByte(hexDigits[c>>4])
			buf.WriteByte(hexDigits[c&0xF])
		}
	}
	buf.WriteString(s[start:])
	buf.WriteByte('"')
	return nil
}

// writeNumber writes f as ECMAScript's Number.prototype.toString does.
func writeNumber(buf *bytes.Buffer, f float64) error {
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return ErrNumber
	}
	if f == 0 {
		buf.WriteByte('0') // also for -0
		return nil
	}
	if f < 0 {
		buf.WriteByte('-')
		f = -f
	}
	// Shortest round-trip digits and the decimal exponent: d.ddd e±x.
	e := strconv.FormatFloat(f, 'e', -1, 64)
	mant, expPart, _ := strings.Cut(e, "e")
	digits := strings.Replace(mant, ".", "", 1)
	exp, err := strconv.Atoi(expPart)
	if err != nil {
		return ErrNumber
	}
	n := exp + 1 // position of the decimal point relative to the digits
	k := len(digits)
	switch {
	case k <= n && n <= 21:
		buf.WriteString(digits)
		buf.WriteString(strings.Repeat("0", n-k))
	case 0 < n && n <= 21:
		buf.WriteString(digits[:n])
		buf.WriteByte('.')
		buf.WriteString(digits[n:])
	case -6 < n && n <= 0:
		buf.WriteString("0.")
		buf.WriteString(strings.Repeat("0", -n))
		buf.WriteString(digits)
	default:
		buf.WriteByte(digits[0])
		if k > 1 {
			buf.WriteByte('.')
			buf.WriteString(digits[1:])
		}
		buf.WriteByte('e')
		if n-1 >= 0 {
			buf.WriteByte('+')
		}
		buf.WriteString(strconv.Itoa(n - 1))
	}
	return nil
}

// Number is the IEEE double that canonical JSON writes for n, or ErrNumber
// when n has none (it is out of the double's range, or does not parse).
func Number(n json.Number) (float64, error) {
	f, err := strconv.ParseFloat(string(n), 64)
	if err != nil {
		return 0, fmt.Errorf("%w: %q", ErrNumber, string(n))
	}
	return f, nil
}

// CheckNumber reports whether canonical JSON keeps the value n's text
// names: ErrNumber when n is out of the double's range (1e400) or does not
// parse, ErrInexact when the double nearest to n, written back with the
// fewest digits that read as it, names another decimal value. 0.1, 1.50,
// 1e2 and 9007199254740992 pass; 9007199254740993 (read as ...992),
// 1.0000000000000001 (read as 1), 1e-400 (read as 0) and 2^60 written out
// in full (1152921504606846976, written back as 1152921504606847000) do
// not. So two numbers that pass have the same canonical form only when
// they are the same value, whatever a reader keeping the exact text
// (Go's json.Number, Python's Decimal) acts on.
func CheckNumber(n json.Number) error {
	f, err := Number(n)
	if err != nil {
		return err
	}
	want, ok := decimalOf(string(n))
	got, _ := decimalOf(strconv.FormatFloat(f, 'e', -1, 64))
	if !ok || want != got {
		return fmt.Errorf("%w: %s reads as %s", ErrInexact, string(n), strconv.FormatFloat(f, 'g', -1, 64))
	}
	return nil
}

// decimal is a decimal value: sign, significant digits without leading or
// trailing zeros, and the power of ten they are multiplied by. Zero is the
// zero decimal, whatever its sign.
type decimal struct {
	neg    bool
	digits string
	exp    int
}

// decimalOf reads a JSON number (or strconv's 'e' format) as a decimal;
// false when its exponent does not fit an int.
func decimalOf(s string) (decimal, bool) {
	var d decimal
	s, d.neg = strings.CutPrefix(s, "-")
	mant, expText, hasExp := strings.Cut(strings.ToLower(s), "e")
	intPart, frac, _ := strings.Cut(mant, ".")
	digits := strings.TrimLeft(intPart+frac, "0")
	trimmed := strings.TrimRight(digits, "0")
	if trimmed == "" {
		return decimal{}, true // zero, with any exponent
	}
	if hasExp {
		e, err := strconv.Atoi(expText)
		if err != nil {
			return decimal{}, false
		}
		d.exp = e
	}
	d.digits, d.exp = trimmed, d.exp-len(frac)+len(digits)-len(trimmed)
	return d, true
}
