package cli

import (
	"strings"
	"testing"
)

// TestCompletionNeedsAKnownShell: a shell cobra has a script for prints it;
// no shell, or one it has none for, is an error naming the shells.
func TestCompletionNeedsAKnownShell(t *testing.T) {
	cases := map[string]struct {
		args   []string
		code   int
		stdout string
		stderr string
	}{
		"bash":     {[]string{"completion", "bash"}, 0, "bash completion", ""},
		"zsh":      {[]string{"completion", "zsh"}, 0, "compdef", ""},
		"no shell": {[]string{"completion"}, 1, "", "autonomy: completion: name a shell: one of bash, fish, powershell, zsh"},
		"tcsh":     {[]string{"completion", "tcsh"}, 1, "", `autonomy: completion: no script for shell "tcsh": one of bash, fish, powershell, zsh`},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			code, out, errs := runCLI(t, tc.args...)
			if code != tc.code || !strings.Contains(out, tc.stdout) || !strings.Contains(errs, tc.stderr) {
				t.Errorf("exit %d, stdout %.80q, stderr %q; want exit %d, stdout with %q, stderr with %q",
					code, out, errs, tc.code, tc.stdout, tc.stderr)
			}
			if tc.code != 0 && out != "" {
				t.Errorf("an error printed help on stdout: %.200q", out)
			}
		})
	}
}
