package server

import (
	"testing"

	"github.com/contractrefine/autonomy/internal/config"
)

// TestModeNoteAtStartup: advisory and disabled say at startup what they do
// not enforce; enforce says nothing of the kind.
func TestModeNoteAtStartup(t *testing.T) {
	cases := map[config.Mode]string{
		config.ModeAdvisory: AdvisoryNote,
		config.ModeDisabled: DisabledNote,
		config.ModeEnforce:  "",
	}
	for mode, want := range cases {
		t.Run(string(mode), func(t *testing.T) {
			e := obsStart(t, func(c *config.Config) { c.ContractRefine.Mode = mode }, Options{ReadinessInterval: -1})
			lines := e.logs.lines(t)
			for _, note := range []string{AdvisoryNote, DisabledNote} {
				got := withMsg(lines, note)
				switch {
				case note == want && (len(got) != 1 || got[0]["level"] != "WARN"):
					t.Errorf("mode %s: lines %v, want one WARN %q", mode, got, note)
				case note != want && len(got) != 0:
					t.Errorf("mode %s logged %q", mode, note)
				}
			}
		})
	}
}
