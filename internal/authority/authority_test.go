package authority

import "testing"

func TestListProblem(t *testing.T) {
	cases := []struct {
		names   []string
		index   int
		problem string
	}{
		{nil, -1, ""},
		{[]string{"role:a", "role:b"}, -1, ""},
		{[]string{"role:a", ""}, 1, "is empty"},
		{[]string{"  "}, 0, "is empty"},
		{[]string{" role:a"}, 0, "starts or ends with white space"},
		{[]string{"role:a", "role:a\t"}, 1, "starts or ends with white space"},
		{[]string{"role:a", "role:b", "role:a"}, 2, "is listed twice"},
	}
	for _, tc := range cases {
		if i, p := ListProblem(tc.names); i != tc.index || p != tc.problem {
			t.Errorf("ListProblem(%q) = %d %q, want %d %q", tc.names, i, p, tc.index, tc.problem)
		}
	}
}
