package preflight

import (
	"encoding/json"
	"strconv"
	"strings"
	"testing"
)

// minimal wraps step JSON into an otherwise valid request.
func minimal(steps string) string {
	return `{"intent":{"summary":"s"},"plan":{"steps":[` + steps + `]},"context":{"actor":{"id":"a"}}}`
}

func TestDecodeRequestErrors(t *testing.T) {
	deep := func(n int) string {
		return minimal(`{"id":"s1","kind":"tool.echo","args":{"x":` + strings.Repeat("[", n) + strings.Repeat("]", n) + `}}`)
	}
	cases := map[string]struct {
		body    string
		path    string
		message string
	}{
		"empty body":             {"  \n", "", "request body is empty"},
		"not JSON":               {"hello", "", "invalid JSON"},
		"array root":             {"[]", "", "must be an object, got an array"},
		"null root":              {"null", "", "must be an object, got null"},
		"unknown top-level":      {`{"intent":{"summary":"s"},"extra":1}`, "/extra", `unknown field "extra"`},
		"case differs":           {`{"Intent":{"summary":"s"}}`, "/Intent", `unknown field "Intent"`},
		"escaped unknown name":   {`{"a/b~":1}`, "/a~1b~0", `unknown field "a/b~"`},
		"unknown step field":     {minimal(`{"id":"s1"},{"id":"s2","idd":"x"}`), "/plan/steps/1/idd", `unknown field "idd"`},
		"unknown actor field":    {`{"intent":{"summary":"s"},"plan":{"steps":[]},"context":{"actor":{"id":"a","role":"x"}}}`, "/context/actor/role", `unknown field "role"`},
		"duplicate field":        {`{"intent":{"summary":"s","summary":"t"}}`, "/intent/summary", `duplicate field "summary"`},
		"duplicate arg":          {minimal(`{"id":"s1","args":{"a":1,"a":2}}`), "/plan/steps/0/args/a", `duplicate field "a"`},
		"duplicate nested arg":   {minimal(`{"id":"s1","args":{"a":[{"b":1,"b":1}]}}`), "/plan/steps/0/args/a/0/b", `duplicate field "b"`},
		"wrong type with index":  {minimal(`{"id":"s1"},{"id":5}`), "/plan/steps/1/id", "must be a string, got a number"},
		"depends_on element":     {minimal(`{"id":"s1","depends_on":[true]}`), "/plan/steps/0/depends_on/0", "must be a string, got a boolean"},
		"null in a string array": {minimal(`{"id":"s1","expected_evidence":[null]}`), "/plan/steps/0/expected_evidence/0", "must be a string, got null"},
		"provenance value":       {minimal(`{"id":"s1","provenance":{"x":1}}`), "/plan/steps/0/provenance/x", "must be a string, got a number"},
		"args not an object":     {minimal(`{"id":"s1","args":[1]}`), "/plan/steps/0/args", "must be an object, got an array"},
		"step not an object":     {minimal(`"s1"`), "/plan/steps/0", "must be an object, got a string"},
		"steps not an array":     {`{"intent":{"summary":"s"},"plan":{"steps":{}}}`, "/plan/steps", "must be an array, got an object"},
		"intent not an object":   {`{"intent":"s"}`, "/intent", "must be an object, got a string"},
		"envelope not an object": {`{"intent":{"summary":"s"},"plan":{"steps":[]},"context":{"actor":{"id":"a"},"request":"x"}}`, "/context/request", "must be an object"},
		"attestation type":       {`{"intent":{"summary":"s"},"plan":{"steps":[]},"context":{"actor":{"id":"a"},"attestation":[]}}`, "/context/attestation", "must be an object, got an array"},
		"summary missing":        {`{"plan":{"steps":[]},"context":{"actor":{"id":"a"}}}`, "/intent/summary", "intent.summary is required"},
		"summary blank":          {`{"intent":{"summary":"  "},"plan":{"steps":[]},"context":{"actor":{"id":"a"}}}`, "/intent/summary", "intent.summary is required"},
		"steps missing":          {`{"intent":{"summary":"s"},"plan":{},"context":{"actor":{"id":"a"}}}`, "/plan/steps", "plan.steps is required"},
		"steps null":             {`{"intent":{"summary":"s"},"plan":{"steps":null},"context":{"actor":{"id":"a"}}}`, "/plan/steps", "plan.steps is required"},
		"actor id missing":       {`{"intent":{"summary":"s"},"plan":{"steps":[]},"context":{"actor":{}}}`, "/context/actor/id", "context.actor.id is required"},
		"trailing document":      {minimal(``) + ` {}`, "", "unexpected data after the JSON document"},
		"trailing garbage":       {minimal(``) + ` x`, "", "unexpected data after the JSON document"},
		"invalid UTF-8 in args":  {minimal("{\"id\":\"s1\",\"args\":{\"q\":\"\xff\"}}"), "", "not valid UTF-8"},
		"lone surrogate in args": {minimal(`{"id":"s1","args":{"q":"\ud800"}}`), "", "lone UTF-16 surrogate"},
		"args differing in case": {minimal(`{"id":"s1","args":{"amountUsd":1,"AMOUNTUSD":2}}`), "/plan/steps/0/args/AMOUNTUSD", `field "AMOUNTUSD" differs from field "amountUsd" only in case`},
		"a field in two cases":   {`{"intent":{"summary":"s","\u017fummary":"t"}}`, "/intent/\u017fummary", `differs from field "summary" only in case`},
		"truncated":              {`{"intent":{"summary":"s"},"plan":{"steps":[{"id":`, "/plan/steps/0/id", "unexpected end of JSON input"},
		"number out of range":    {minimal(`{"id":"s1","args":{"a":[1e999]}}`), "/plan/steps/0/args/a/0", "number 1e999 is out of range"},
		"too many args values":   {minimal(`{"id":"s1","args":{"a":[` + strings.Repeat("1,", MaxArgsValues) + `1]}}`), "/plan/steps/0/args/a/" + strconv.Itoa(MaxArgsValues-2), "the args hold more than 10000 values"},
		"integer beyond 2^53":    {minimal(`{"id":"s1","args":{"accountId":9007199254740993}}`), "/plan/steps/0/args/accountId", "number 9007199254740993 does not round-trip through a double"},
		"digits beyond a double": {minimal(`{"id":"s1","args":{"b":{"c":1.0000000000000001}}}`), "/plan/steps/0/args/b/c", "number 1.0000000000000001 does not round-trip through a double"},
		"too deep":               {deep(MaxNesting - 4), "", "JSON nesting is deeper than 64 levels"},
		"very deep":              {strings.Repeat("[", 1<<20), "", "JSON nesting is deeper than 64 levels"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			req, err := DecodeRequest([]byte(tc.body))
			if err == nil {
				t.Fatalf("decoded %+v, want an error", req)
			}
			if err.Code != CodeMalformedRequest || err.Path != tc.path || !strings.Contains(err.Message, tc.message) {
				t.Errorf("error = %+v, want path %q and a message containing %q", err, tc.path, tc.message)
			}
		})
	}
}

func TestDecodeRequest(t *testing.T) {
	t.Run("refund", func(t *testing.T) {
		body := strings.Replace(refundJSON, `"required_rollback": "rb.refund.void"`,
			`"required_rollback": "rb.refund.void", "request": {"contractVersion": "x", "anything": {"goes": [1]}}`, 1)
		req, err := DecodeRequest([]byte(body))
		if err != nil {
			t.Fatal(err)
		}
		s2 := req.Plan.Steps[1]
		if s2.Args["amountUsd"] != json.Number("125") || s2.DependsOn[0] != "s1" || s2.Provenance["amountUsd"] != "input:/amountUsd" {
			t.Errorf("step s2 = %+v", s2)
		}
		if req.Context.Attestation == nil || req.Context.Attestation.NodeID != "edge-7" || req.Context.DecisionChain == nil {
			t.Errorf("context = %+v", req.Context)
		}
		if compact(string(req.Context.Request)) != `{"anything":{"goes":[1]},"contractVersion":"x"}` {
			t.Errorf("context.request = %s", req.Context.Request)
		}
	})
	cases := map[string]struct {
		body  string
		check func(*Request) bool
	}{
		"empty steps are a plan_shape matter": {
			minimal(``), func(r *Request) bool { return r.Plan.Steps != nil && len(r.Plan.Steps) == 0 },
		},
		"unknown names inside args are data": {
			minimal(`{"id":"s1","args":{"Anything":{"x":[1,2.50,null,true]}}}`),
			func(r *Request) bool {
				inner := r.Plan.Steps[0].Args["Anything"].(map[string]any)["x"].([]any)
				return inner[1] == json.Number("2.50") && inner[2] == nil
			},
		},
		"null optional fields are absent": {
			`{"intent":{"summary":"s","plan_hash":null},"plan":{"steps":[{"id":"s1","args":null,"zone":null}]},
			  "context":{"actor":{"id":"a"},"attestation":null,"request":null}}`,
			func(r *Request) bool {
				return r.Plan.Steps[0].Args == nil && r.Context.Attestation == nil && r.Context.Request == nil
			},
		},
		"brackets inside strings do not nest": {
			minimal(`{"id":"` + strings.Repeat("[{", 100) + `","args":{"s":"\"]]]"}}`),
			func(r *Request) bool { return len(r.Plan.Steps[0].ID) == 200 },
		},
		"nesting of exactly 64": {
			minimal(`{"id":"s1","args":{"x":` + strings.Repeat("[", MaxNesting-5) + strings.Repeat("]", MaxNesting-5) + `}}`),
			func(r *Request) bool { return r.Plan.Steps[0].Args["x"] != nil },
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			req, err := DecodeRequest([]byte(tc.body))
			if err != nil {
				t.Fatal(err)
			}
			if !tc.check(req) {
				t.Errorf("decoded %+v", req)
			}
		})
	}
}

func TestRequestErrorMessage(t *testing.T) {
	err := malformed("/intent/summary", "required")
	if got := err.Error(); got != `preflight: malformed-request at "/intent/summary": required` {
		t.Errorf("Error() = %q", got)
	}
}

func FuzzDecodeRequest(f *testing.F) {
	f.Add([]byte(refundJSON))
	f.Add([]byte(minimal(`{"id":"s1","kind":"tool.echo","args":{"a":[1,{"b":null}]}}`)))
	f.Add([]byte(`{"intent":{"summary":"s"},"plan":{"steps":[]},"context":{"actor":{"id":"a"},"request":{"x":1}}}`))
	f.Fuzz(func(t *testing.T, body []byte) {
		req, rerr := DecodeRequest(body)
		if rerr != nil {
			if req != nil || rerr.Code != CodeMalformedRequest {
				t.Fatalf("error %+v with request %+v", rerr, req)
			}
			return
		}
		// A decoded request re-encodes, and the encoding decodes to a
		// request that encodes the same way.
		first, err := json.Marshal(req)
		if err != nil {
			t.Fatalf("re-encode: %v", err)
		}
		again, rerr := DecodeRequest(first)
		if rerr != nil {
			t.Fatalf("re-decode %s: %v", first, rerr)
		}
		second, err := json.Marshal(again)
		if err != nil {
			t.Fatalf("re-encode again: %v", err)
		}
		if string(first) != string(second) {
			t.Fatalf("encoding is not stable:\n%s\n%s", first, second)
		}
	})
}

// TestPastBoundCountsAsTheDecoder holds the flat count that refuses args
// past MaxArgsValues to the decoder's: for every room, pastBound refuses
// exactly when the walk would, naming the same value.
func TestPastBoundCountsAsTheDecoder(t *testing.T) {
	for _, args := range []string{
		`{}`,
		`{"a":1}`,
		` { "a" : [ 1 , "x" , { "b" : null , "c~/" : [ true , false ] } ] , "d" : { } , "e" : [ ] , "f" : "s\"q}]," }`,
		`{"k\u00e9y":[[1],[2,[3]]],"z\\":{"y":{"x":-1.5e3}}}`,
		`{"":[{},{"":[]}],"n":[0,1,2,3,4,5,6,7,8,9,10,11]}`,
	} {
		walked := 0
		for room := 0; ; room++ {
			d := &requestDecoder{dec: newTokens([]byte(args)), body: []byte(args), values: MaxArgsValues - room}
			tok, _ := d.dec.Token()
			_, werr := d.value(tok, "")
			rel, over := pastBound([]byte(strings.TrimLeft(args, " ")), room)
			if werr == nil {
				if over {
					t.Errorf("%s: room %d: refused at %q, the decoder took it", args, room, rel)
				}
				walked = room
				break
			}
			if !over || rel != werr.Path {
				t.Errorf("%s: room %d: pastBound = %q, %v; the decoder refused %q", args, room, rel, over, werr.Path)
			}
		}
		if walked == 0 {
			t.Errorf("%s: never decoded", args)
		}
	}
}

// TestHugeArgsRefusedCheaply: a 1 MB args object of 70,000 keys, the body
// of the issue-21 attack, is refused before any of it is decoded. The walk
// that refused it at the 10,001st value took 150,000 allocations (5.4 MB).
func TestHugeArgsRefusedCheaply(t *testing.T) {
	body := hugeArgsBody(70000)
	allocs := testing.AllocsPerRun(5, func() {
		if _, err := DecodeRequest(body); err == nil || !strings.Contains(err.Message, "more than 10000 values") ||
			err.Path != "/plan/steps/0/args/k0009999" {
			t.Fatalf("want the args bound at /plan/steps/0/args/k0009999, got %+v", err)
		}
	})
	if allocs > 1000 {
		t.Errorf("refusing 70,000 keys took %.0f allocations, want at most 1000", allocs)
	}
}
